import { isIP } from "node:net";
import type { Client, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest, onRequestHookHandler } from "fastify";
import { authThrottled } from "../core/auth/auth-throttle.js";
import { presentedCredential } from "../core/auth/credentials.js";
import { KnownCredentials } from "../core/auth/known-credentials.js";
import type { AuthService, Principal } from "../gen/tollgate/auth/v1/auth_pb.js";
import { RefusedAddresses } from "./refused-addresses.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the authentication hook on every authenticated route. */
    principal: Principal | null;
    /** The gateway's public origin for links in answers (TOLLGATE_PUBLIC_URL, else this request's). */
    publicOrigin: string;
  }
}

/**
 * An onRequest hook that authenticates the presented key through the core before the body is
 * read, so an unauthenticated caller never costs a body parse. The client's address goes with
 * it: the core throttles failed authentications per address and refuses a blocked address
 * (429 AUTH_THROTTLED) before looking its key up; this hook then refuses that address itself
 * until the block ends, without calling the core, and holds each such refusal back a second —
 * except for a key that authenticated from that address before, which goes on to the core (it
 * lets such keys through too). Every scope built on one `auth` client shares what it learns.
 * Errors reach the scope's own error handler, which answers in that format's envelope: a
 * request without a key gets 401 (the x402 door, which takes no key, does not use this hook).
 */
export function authenticateHook(auth: Client<typeof AuthService>): onRequestHookHandler {
  const blocked = blockedAddressesOf(auth);
  return async (request: FastifyRequest) => {
    const address = clientAddress(request);
    const presented = presentedCredential((name) => headerValue(request, name));
    const refusal = blocked.refusal(address, presented);
    if (refusal !== undefined) {
      await blocked.holdBack();
      throw refusal;
    }
    const key = presented ?? "";
    try {
      const { principal } = await auth.authenticate(
        { key, clientAddress: address },
        { headers: { "x-request-id": request.id } },
      );
      request.principal = principal ?? null;
      if (presented !== undefined) blocked.passed(address, presented);
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
  refusal(address: string, presented: string | undefined): ConnectError | undefined {
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
  passed(address: string, presented: string): void {
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
