import { randomBytes } from "node:crypto";
import type { SessionStore } from "../ports/accounts.js";
import type { X402SignInProof, X402SignInProofs } from "../ports/x402.js";
import { payerSignInRefused, payerSignInRequired, payerSignInUnavailable } from "./billing-errors.js";
import type { ChainConfig } from "./chain-registry.js";

/**
 * Who a keyless caller is, proven with x402's sign-in-with-x extension (CAIP-122: SIWE on EVM,
 * SIWS on Solana): the gateway issues a challenge (a 402 whose `PAYMENT-REQUIRED` declares the
 * extension, with a single-use nonce it stored), the caller's wallet signs it and sends it back
 * as `SIGN-IN-WITH-X`, and the gateway checks the message (domain and uri bound to its own
 * configured origin, never the request's Host; issued within the nonce's life; not expired),
 * the signature, and then spends the nonce. The extension's wire format and checks are behind the
 * {@link X402SignInProofs} port (src/chains/x402/sign-in-with-x.ts implements it with
 * `@x402/extensions/sign-in-with-x`); the rules are here. See docs/receipts.md.
 */

/** A challenge is good this long: its nonce is void after, and a proof issued earlier is refused. */
export const SIGN_IN_TTL_MS = 5 * 60_000;

/**
 * Sign-in nonces share the dashboard's nonce table; this prefix keeps the two apart, so a
 * dashboard nonce never answers a receipt challenge, nor the reverse.
 */
const NONCE_KEY_PREFIX = "x402-sign-in:";

/** A `SIGN-IN-WITH-X` header is read up to this size; a real one is well under 2 KB. */
const MAX_HEADER_BYTES = 8 * 1024;

/** The statement the wallet shows its owner. */
const STATEMENT = "Sign in to read the receipt of a call this wallet paid with x402.";

/** What sign-in needs. */
export interface X402SignInDeps {
  /** Where nonces are kept until spent or expired (the same store for every gateway host). */
  readonly nonces: Pick<SessionStore, "insertNonce" | "useNonce" | "purgeNonces">;
  /**
   * The gateway's public origin proofs are bound to: TOLLGATE_PUBLIC_URL, else in dev the
   * facade's listen origin; undefined when neither is known (sign-in then refuses, fail closed).
   */
  readonly origin: () => string | undefined;
  /** The chains a payer may have paid on: challenges offer their networks, EVM ones first. */
  readonly chains: readonly ChainConfig[];
  /** The extension's wire format and its message and signature checks. */
  readonly proofs: X402SignInProofs;
  readonly now: () => number;
}

/** Wallet sign-in for keyless payers (x402 sign-in-with-x). */
export class X402SignIn {
  readonly #networks: readonly ChainConfig[];

  constructor(private readonly deps: X402SignInDeps) {
    // x402's fetch wrapper signs for the first offer's network: EVM wallets are the common case.
    this.#networks = [
      ...deps.chains.filter((c) => c.family === "evm"),
      ...deps.chains.filter((c) => c.family === "solana"),
    ].filter((c, i, all) => all.findIndex((o) => o.network === c.network) === i);
  }

  /**
   * The wallet address `header` proves its sender controls, for the resource at `path` on the
   * gateway's origin. Without a proof (`header` ""), the 402 carrying a fresh challenge; a proof
   * that fails any check is refused (Unauthenticated) and its nonce, if good, stays unspent.
   */
  async payer(header: string, path: string): Promise<string> {
    const origin = this.#origin();
    if (header === "") throw await this.#challenge(origin, path);
    if (header.length > MAX_HEADER_BYTES) {
      throw payerSignInRefused(
        "invalid_siwx_header",
        `The SIGN-IN-WITH-X header is over ${MAX_HEADER_BYTES} bytes.`,
      );
    }
    let proof: X402SignInProof;
    try {
      proof = this.deps.proofs.parse(header);
    } catch (error) {
      throw payerSignInRefused("invalid_siwx_header", (error as Error).message);
    }
    const expected = new URL(origin);
    const checked = await this.deps.proofs.validate(proof, expected, SIGN_IN_TTL_MS);
    if (!checked.isValid) throw payerSignInRefused(checked.invalidReason, checked.invalidMessage);
    // A proof answers the challenge of one resource: the receipt it was issued for.
    if (new URL(proof.uri).pathname !== path) {
      throw payerSignInRefused(
        "invalid_siwx_uri_mismatch",
        `The proof was signed for ${proof.uri}, not ${expected.origin}${path}.`,
      );
    }
    if (!this.#networks.some((c) => c.network === proof.chainId)) {
      throw payerSignInRefused(
        "invalid_siwx_unsupported_chain",
        `The proof names chain ${proof.chainId}; the gateway takes ${this.#networks.map((c) => c.network).join(", ")}.`,
      );
    }
    // EOA signatures only (no RPC): a smart-contract wallet cannot pay with x402's schemes here either.
    const verified = await this.deps.proofs.verify(proof);
    if (!verified.isValid) throw payerSignInRefused(verified.invalidReason, verified.invalidMessage);
    // Spent last, so that junk never costs a write; the update is atomic, so a nonce answers once.
    if (!(await this.deps.nonces.useNonce(NONCE_KEY_PREFIX + proof.nonce, this.deps.now()))) {
      throw payerSignInRefused(
        "invalid_siwx_nonce",
        "The proof's nonce is unknown, used already or expired: ask for a new challenge (send the request without SIGN-IN-WITH-X).",
      );
    }
    return verified.payer;
  }

  #origin(): string {
    const origin = this.deps.origin();
    if (origin === undefined) throw payerSignInUnavailable();
    return origin;
  }

  /** The 402 for `path`: a stored single-use nonce in the extension's `PAYMENT-REQUIRED` declaration. */
  async #challenge(origin: string, path: string) {
    const now = this.deps.now();
    // Hex: CAIP-122 (and the SIWE parser) takes an alphanumeric nonce of 8 characters or more.
    const nonce = randomBytes(16).toString("hex");
    await this.deps.nonces.purgeNonces(now);
    await this.deps.nonces.insertNonce(NONCE_KEY_PREFIX + nonce, now + SIGN_IN_TTL_MS);
    const url = `${origin}${path}`;
    const header = this.deps.proofs.challengeHeader({
      domain: new URL(origin).host,
      url,
      statement: STATEMENT,
      nonce,
      issuedAt: now,
      expiresAt: now + SIGN_IN_TTL_MS,
      networks: this.#networks.map((c) => ({ network: c.network, family: c.family, asset: c.asset.address })),
      error: "Sign in with the wallet that paid the call (SIGN-IN-WITH-X): there is nothing to pay.",
      description: "The signed receipt of a call paid with x402",
    });
    return payerSignInRequired(header);
  }
}
