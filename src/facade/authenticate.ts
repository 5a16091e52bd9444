import { isIP } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { type Client, ConnectError } from "@connectrpc/connect";
import type { FastifyRequest, onRequestHookHandler } from "fastify";
import { authThrottled } from "../core/auth/auth-throttle.js";
import { throttleKey } from "../core/auth/client-address.js";
import { presentedCredential } from "../core/auth/credentials.js";
import { KnownCredentials } from "../core/auth/known-credentials.js";
import { errorInfo } from "../core/errors.js";
import type { AuthService, Principal } from "../gen/tollgate/auth/v1/auth_pb.js";

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

/** Blocked addresses remembered at most; past it they are asked about again (a bound, not a policy). */
const BLOCKED_LIMIT = 10_000;

/**
 * How long the refusal of a blocked address is held back. A client waits for its answers, so a
 * guesser gets about one answer per connection per second instead of as many as the gateway can
 * give: its flood stops competing with valid callers for this process (answered at once, 2,000
 * guesses over 8 connections doubled a valid caller's median latency; held back, they did not).
 */
const REFUSAL_DELAY_MS = 1_000;

/** Refusals held back at once at most; past it they are answered at once, so held sockets stay bounded. */
const MAX_HELD_REFUSALS = 1_000;

/**
 * The addresses the core refused as throttled, and until when. A flood from a blocked address
 * then costs the facade an HTTP answer and no more: no RPC, no counter read (in Redis, a round
 * trip). The copy cannot go stale: nothing ends a block early, and no request of the address
 * reaches the core meanwhile to extend it. The end is the core's `retry_after`, rounded up to
 * the second, so an address may wait up to a second longer here than the block itself. The keys
 * that authenticated from each address are remembered too, so that they are not refused here
 * while the core would let them through.
 */
class BlockedAddresses {
  readonly #until = new Map<string, { readonly until: number; readonly limit: number }>();
  readonly #known = new KnownCredentials();
  #held = 0;

  /**
   * The refusal for `address` while its block lasts, unless `presented` authenticated from it
   * before; undefined otherwise.
   */
  refusal(address: string, presented: string | undefined): ConnectError | undefined {
    if (this.#until.size === 0) return undefined;
    const key = throttleKey(address);
    const entry = this.#until.get(key);
    if (entry === undefined) return undefined;
    const now = Date.now();
    if (entry.until <= now) {
      this.#until.delete(key);
      return undefined;
    }
    if (presented !== undefined && this.#known.has(address, presented)) return undefined;
    return authThrottled(
      { allowed: false, limit: entry.limit, remaining: 0, resetMs: entry.until - now },
      now,
    );
  }

  /** Waits before a refusal is sent ({@link REFUSAL_DELAY_MS}), unless too many already wait. */
  async holdBack(): Promise<void> {
    if (this.#held >= MAX_HELD_REFUSALS) return;
    this.#held++;
    try {
      await sleep(REFUSAL_DELAY_MS);
    } finally {
      this.#held--;
    }
  }

  /** Takes note of a key that authenticated from `address`. */
  passed(address: string, presented: string): void {
    this.#known.add(address, presented);
  }

  /** Takes note of the core's answer when it refused `address` as throttled. */
  remember(address: string, error: unknown): void {
    if (!(error instanceof ConnectError)) return;
    const info = errorInfo(error);
    if (info?.reason !== "AUTH_THROTTLED") return;
    if (this.#until.size >= BLOCKED_LIMIT) this.#forgetEnded();
    if (this.#until.size >= BLOCKED_LIMIT) this.#until.clear();
    this.#until.set(throttleKey(address), {
      until: Date.now() + Number(info.metadata.retry_after) * 1000,
      limit: Number(info.metadata.limit),
    });
  }

  #forgetEnded(): void {
    const now = Date.now();
    for (const [key, entry] of this.#until) if (entry.until <= now) this.#until.delete(key);
  }
}

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
