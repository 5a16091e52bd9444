import { createContextKey } from "@connectrpc/connect";
import { digestKey } from "./keys.js";

/**
 * The credential a request presents: `x-api-key`, else the token of `Authorization: Bearer`.
 * Pure, shared by the facade (HTTP headers) and the core (RPC metadata).
 */
export function presentedCredential(get: (name: string) => string | null | undefined): string | undefined {
  const apiKey = get("x-api-key")?.trim();
  if (apiKey) return apiKey;
  const authorization = get("authorization")?.trim();
  if (!authorization) return undefined;
  const match = /^bearer\s+(.+)$/i.exec(authorization);
  // An Authorization header that is not Bearer is presented but unusable: treated as malformed.
  return match ? match[1]!.trim() : authorization;
}

/**
 * A presented credential (an API key, the operator token) and its SHA-256 digest, computed the
 * first time it is asked for and kept: the key lookup, the operator-token compare and the
 * known-credentials records of both the facade and the core all take this one digest, so an
 * in-process keyed call hashes its key once.
 */
export class Credential {
  #digest: Buffer | undefined;

  constructor(readonly secret: string) {}

  /** SHA-256 of the whole secret (what {@link digestKey} stores for a key). */
  get digest(): Buffer {
    this.#digest ??= digestKey(this.secret);
    return this.#digest;
  }
}

/** `presented` as a {@link Credential}: the same object when it already is one. */
export function credentialOf(presented: string | Credential): Credential {
  return typeof presented === "string" ? new Credential(presented) : presented;
}

/**
 * The credential an in-process facade parsed from the client's headers, handed to the core with
 * the Authenticate RPC that carries its secret, so the core reuses its digest instead of hashing
 * the key again. Only code in this process can set a context value; the core takes it only from a
 * proven facade and only for the very secret the request names (auth-service.ts, `handedOverCredential`).
 */
export const presentedCredentialKey = createContextKey<Credential | undefined>(undefined, {
  description: "credential parsed by the in-process facade",
});
