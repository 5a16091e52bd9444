import { isIP } from "node:net";
import { type Client, type ConnectError, createContextValues } from "@connectrpc/connect";
import type { FastifyRequest, onRequestHookHandler } from "fastify";
import { authThrottled } from "../core/auth/auth-throttle.js";
import { Credential, presentedCredential, presentedCredentialKey } from "../core/auth/credentials.js";
import { KnownCredentials } from "../core/auth/known-credentials.js";
import type { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { RefusedAddresses } from "./refused-addresses.js";

declare module "fastify" {
  interface FastifyRequest {
    /**
     * The caller the authentication hook authenticated: the one value every later core call of
     * this request hands over (core-call.ts). Null before the hook, and on routes without it
     * (x402's door, which takes no key).
     */
    caller: AuthenticatedCaller | null;
    /** The gateway's public origin for links in answers (TOLLGATE_PUBLIC_URL, else this request's). */
    publicOrigin: string;
  }
}

/** A key the core authenticated for this request, and whose it is. */
export interface AuthenticatedCaller {
  /** The key as the client presented it, parsed once (and hashed at most once) per request. */
  readonly credential: Credential;
  readonly accountId: string;
  readonly keyId: string;
}

/**
 * An onRequest hook that authenticates the presented key through the core before the body is
 * read, so an unauthenticated caller never costs a body parse. The credential is parsed from the
 * headers here, once per request, and kept on the request as {@link FastifyRequest.caller}. The
 * client's address goes with it: the core throttles failed authentications per address and
 * refuses a blocked address (429 AUTH_THROTTLED) before looking its key up; this hook then
 * refuses that address itself until the block ends, without calling the core, and holds each
 * such refusal back a second — except for a key that authenticated from that address before,
 * which goes on to the core (it lets such keys through too). Every scope built on one `auth`
 * client shares what it learns. Errors reach the scope's own error handler, which answers in that
 * format's envelope: a request without a key gets 401 (the core's KEY_MISSING, or `whenMissing`'s
 * error when given, thrown before anything else; the x402 door, which takes no key, does not use
 * this hook).
 */
export function authenticateHook(
  auth: Client<typeof AuthService>,
  whenMissing?: () => Error,
): onRequestHookHandler {
  const blocked = blockedAddressesOf(auth);
  return async (request: FastifyRequest) => {
    const secret = presentedCredential((name) => headerValue(request, name));
    if (secret === undefined && whenMissing !== undefined) throw whenMissing();
    const address = clientAddress(request);
    const credential = secret === undefined ? undefined : new Credential(secret);
    const refusal = blocked.refusal(address, credential);
    if (refusal !== undefined) {
      await blocked.holdBack();
      throw refusal;
    }
    try {
      const { principal } = await auth.authenticate(
        { key: secret ?? "", clientAddress: address },
        {
          headers: { "x-request-id": request.id },
          // An in-process core reuses the credential's digest; a remote one never sees it.
          contextValues:
            credential === undefined
              ? undefined
              : createContextValues().set(presentedCredentialKey, credential),
        },
      );
      if (credential === undefined) return;
      if (principal !== undefined && principal.keyId !== "") {
        request.caller = { credential, accountId: principal.accountId, keyId: principal.keyId };
      }
      blocked.passed(address, credential);
    } catch (error) {
      blocked.remember(address, error);
      throw error;
    }
  };
}

/**
 * The client's IP address: Fastify's `request.ip`, which is the connection's peer unless
 * TOLLGATE_TRUST_PROXY names that peer as a proxy (then the address that proxy forwarded). A
 * forwarded value that is not an address falls back to the peer.
 */
export function clientAddress(request: FastifyRequest): string {
  return isIP(request.ip) !== 0 ? request.ip : (request.socket.remoteAddress ?? "");
}

/** One record of blocks per core client: a facade's scopes share it (a block, a known key). */
const blockedByClient = new WeakMap<object, BlockedAddresses>();

function blockedAddressesOf(auth: Client<typeof AuthService>): BlockedAddresses {
  let blocked = blockedByClient.get(auth);
  if (blocked === undefined) {
    blocked = new BlockedAddresses();
    blockedByClient.set(auth, blocked);
  }
  return blocked;
}

/**
 * The addresses the core blocked for failed authentications (AUTH_THROTTLED), answered here until
 * the block ends, and the keys that authenticated from each address: those are not refused here,
 * as the core would let them through.
 */
class BlockedAddresses {
  readonly #refused = new RefusedAddresses("AUTH_THROTTLED", authThrottled);
  readonly #known = new KnownCredentials();

  /**
   * The refusal for `address` while its block lasts, unless `presented` authenticated from it
   * before; undefined otherwise.
   */
  refusal(address: string, presented: Credential | undefined): ConnectError | undefined {
    const refusal = this.#refused.refusal(address);
    if (refusal === undefined) return undefined;
    if (presented !== undefined && this.#known.has(address, presented)) return undefined;
    return refusal;
  }

  /** Waits before a refusal is sent, unless too many already wait. */
  holdBack(): Promise<void> {
    return this.#refused.holdBack();
  }

  /** Takes note of a key that authenticated from `address`. */
  passed(address: string, presented: Credential): void {
    this.#known.add(address, presented);
  }

  /** Takes note of the core's answer when it refused `address` as throttled. */
  remember(address: string, error: unknown): void {
    this.#refused.remember(address, error);
  }
}

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
