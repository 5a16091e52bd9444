import { createHash, createHmac, randomBytes } from "node:crypto";
import { Code } from "@connectrpc/connect";
import type { ChainRegistry } from "../billing/chain-registry.js";
import { accountSuspended, reasonError } from "../errors.js";
import { newId } from "../ids.js";
import type {
  AccountRow,
  AccountStore,
  IdentityRow,
  SessionStore,
  WalletFamilyText,
} from "../ports/accounts.js";
import type { WalletSignatures } from "../ports/wallets.js";
import {
  checkSignInMessage,
  parseSignInMessage,
  SignInRefused,
  verifySignInSignature,
} from "./sign-in-message.js";

/** The request header that carries a dashboard session token to the core. */
export const SESSION_HEADER = "x-tollgate-session";
/** A sign-in nonce is void this long after it was issued (issue 7: five minutes). */
export const NONCE_TTL_MS = 5 * 60_000;
/** A session lasts this long after sign-in; signing in again starts a new one. */
export const SESSION_TTL_MS = 12 * 60 * 60_000;
/** How often, at most, issuing a nonce also deletes the expired ones. */
const NONCE_PURGE_INTERVAL_MS = 60_000;
/** How far ahead of the gateway's clock a message's `Issued At` may be. */
const CLOCK_SKEW_MS = 60_000;
const TOKEN_PREFIX = "tgs_";
const NONCE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/** A session as its caller sees it. */
export interface SessionView {
  readonly sessionId: string;
  readonly account: AccountRow;
  readonly identities: IdentityRow[];
  readonly expiresAt: number;
}

/** A domain (host and port) and origin a sign-in message may name: the gateway's own. */
export interface SignInOrigin {
  readonly domain: string;
  readonly origin: string;
}

/** A sign-in attempt, with where the gateway is (one or more spellings of it; never empty). */
export interface SignInInput {
  readonly family: WalletFamilyText;
  readonly message: string;
  readonly signature: string;
  readonly expected: readonly SignInOrigin[];
}

/** The CSRF token of a session: derived from its token, so only a holder of the cookie can know it. */
export function csrfTokenFor(sessionToken: string): string {
  return createHmac("sha256", sessionToken).update("tollgate/csrf").digest("base64url");
}

export const signInRefused = (problem: string, message: string) =>
  reasonError(Code.Unauthenticated, "SIGN_IN_REFUSED", message, { problem });
export const sessionInvalid = () =>
  reasonError(
    Code.Unauthenticated,
    "SESSION_INVALID",
    "The session is missing, expired or signed out: sign in again.",
  );
export const identityLinked = () =>
  reasonError(Code.AlreadyExists, "IDENTITY_LINKED", "That wallet already signs in to another account.");

/** What the sessions need: their tables, the accounts, the chains a message may name. */
export interface SessionsDeps {
  readonly repo: SessionStore;
  readonly accounts: AccountStore;
  readonly chains: ChainRegistry;
  /** Parses and verifies what wallets sign (src/chains/wallet-signatures.ts). */
  readonly wallets: WalletSignatures;
  readonly now: () => number;
}

/** Wallet sign-in (SIWE and its Solana twin), nonces and dashboard sessions. */
export class Sessions {
  private readonly chainIds: Record<WalletFamilyText, ReadonlySet<string>>;
  #purgedAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly deps: SessionsDeps) {
    const evm = new Set<string>();
    const solana = new Set<string>();
    for (const chain of deps.chains.chains) {
      if (chain.family === "evm" && chain.chainId !== undefined) evm.add(String(chain.chainId));
      if (chain.family === "solana") solana.add(chain.id);
    }
    this.chainIds = { evm, solana };
  }

  /** A fresh single-use nonce, stored until it expires. */
  async createNonce(): Promise<{ nonce: string; expiresAt: number }> {
    const now = this.deps.now();
    const bytes = randomBytes(32);
    let nonce = "";
    // 62 letters and digits; the modulo bias (256 mod 62) leaves well over 180 bits of entropy.
    for (const byte of bytes) nonce += NONCE_ALPHABET[byte % NONCE_ALPHABET.length];
    const expiresAt = now + NONCE_TTL_MS;
    // Expired nonces are swept once a minute at most, not on every request (a used or expired
    // one is refused by useNonce either way; the sweep only keeps the table small).
    if (now - this.#purgedAt >= NONCE_PURGE_INTERVAL_MS) {
      this.#purgedAt = now;
      await this.deps.repo.purgeNonces(now);
    }
    await this.deps.repo.insertNonce(nonce, expiresAt);
    return { nonce, expiresAt };
  }

  /**
   * Checks a signed message and its nonce (consumed by the attempt, whatever the outcome), then
   * opens a session for the identity's account, creating the account at first sign-in. With
   * `linkTo`, adds the identity to that account and opens no session.
   */
  async signIn(
    input: SignInInput,
    linkTo?: string,
  ): Promise<{ token: string | undefined; view: SessionView; created: boolean }> {
    const now = this.deps.now();
    const message = await refusing(() => parseSignInMessage(input.family, input.message, this.deps.wallets));
    if (!(await this.deps.repo.useNonce(message.nonce, now))) {
      throw signInRefused("nonce", "The nonce is unknown, used already or expired: ask for a new one.");
    }
    // Several spellings of the gateway (dev: 127.0.0.1 and localhost): the message's own, if any.
    const expected = input.expected.find((e) => e.domain === message.domain) ?? input.expected[0]!;
    await refusing(() =>
      checkSignInMessage(message, {
        domain: expected.domain,
        origin: expected.origin,
        chainIds: this.chainIds[input.family],
        now,
        skewMs: CLOCK_SKEW_MS,
      }),
    );
    if (!(await verifySignInSignature(message, input.message, input.signature, this.deps.wallets))) {
      throw signInRefused(
        "signature",
        `The signature is not ${message.address}'s signature of this message.`,
      );
    }
    if (linkTo !== undefined) {
      const owner = await this.deps.repo.linkIdentity(message.family, message.address, linkTo, now);
      if (owner !== linkTo) throw identityLinked();
      return { token: undefined, view: await this.view("", linkTo, now + SESSION_TTL_MS), created: false };
    }
    const { accountId, created } = await this.deps.repo.accountForIdentity(
      message.family,
      message.address,
      { id: newId("acct"), name: shortAddress(message.address) },
      now,
    );
    const token = TOKEN_PREFIX + randomBytes(32).toString("base64url");
    const sessionId = newId("sess");
    const expiresAt = now + SESSION_TTL_MS;
    const view = await this.view(sessionId, accountId, expiresAt);
    // A session of a suspended account is never stored (and resolve() re-checks on every use).
    if (view.account.status !== "active") throw accountSuspended();
    await this.deps.repo.insertSession(sessionId, digest(token), accountId, now, expiresAt);
    return { token, view, created };
  }

  /** The live session a token names; SESSION_INVALID otherwise, ACCOUNT_SUSPENDED for a suspended account. */
  async resolve(token: string): Promise<SessionView> {
    if (!token.startsWith(TOKEN_PREFIX)) throw sessionInvalid();
    const row = await this.deps.repo.findSession(digest(token));
    if (row === undefined || row.ended_at !== null || row.expires_at <= this.deps.now())
      throw sessionInvalid();
    const view = await this.view(row.id, row.account_id, row.expires_at);
    if (view.account.status !== "active") throw accountSuspended();
    return view;
  }

  /** Ends a session; ending an ended one changes nothing. */
  async end(sessionId: string): Promise<void> {
    await this.deps.repo.endSession(sessionId, this.deps.now());
  }

  private async view(sessionId: string, accountId: string, expiresAt: number): Promise<SessionView> {
    return {
      sessionId,
      account: (await this.deps.accounts.getAccount(accountId))!,
      identities: await this.deps.repo.listIdentities(accountId),
      expiresAt,
    };
  }
}

async function refusing<T>(work: () => T | Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (error instanceof SignInRefused) throw signInRefused(error.problem, error.message);
    throw error;
  }
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}

function shortAddress(address: string): string {
  return `${address.slice(0, 6)}…${address.slice(-4)}`;
}
