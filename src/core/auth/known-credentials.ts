import { throttleKey } from "./client-address.js";
import { type Credential, credentialOf } from "./credentials.js";

/**
 * Pairs remembered at most: about 100 bytes each, so some 10 MiB. Past it the pair used least
 * recently is forgotten (its key then waits out a block at that address like an unknown one).
 */
export const KNOWN_CREDENTIALS_LIMIT = 100_000;

/**
 * The credentials (API keys, the operator token) that authenticated from each client address,
 * by SHA-256 digest, never the secret itself. While an address is blocked for failed
 * authentications, a credential it presented successfully before the block still gets through:
 * callers behind one NAT or proxy share an address with whoever is guessing there. Only pairs
 * learned before the block count, since a blocked address's unknown credentials are refused
 * unchecked; so the block still tells a guesser nothing about its guesses. Bounded: the least
 * recently used pair goes first.
 */
export class KnownCredentials {
  readonly #pairs = new Map<string, true>();

  constructor(private readonly limit = KNOWN_CREDENTIALS_LIMIT) {}

  /** Whether `credential` authenticated from `address` (counted as {@link throttleKey} does). */
  has(address: string, credential: string | Credential): boolean {
    return this.#pairs.has(pairOf(address, credential));
  }

  /** Records that `credential` authenticated from `address`, as the most recently used pair. */
  add(address: string, credential: string | Credential): void {
    const pair = pairOf(address, credential);
    // Deleted and set again: a Map iterates in insertion order, so the first entry is the oldest.
    this.#pairs.delete(pair);
    this.#pairs.set(pair, true);
    if (this.#pairs.size > this.limit) {
      const oldest = this.#pairs.keys().next().value;
      if (oldest !== undefined) this.#pairs.delete(oldest);
    }
  }

  /** Pairs remembered now (tests). */
  get size(): number {
    return this.#pairs.size;
  }
}

/** The address's throttle key and the credential's digest (its own, computed once per credential). */
function pairOf(address: string, credential: string | Credential): string {
  return `${throttleKey(address)} ${credentialOf(credential).digest.toString("base64")}`;
}
