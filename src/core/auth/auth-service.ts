import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  type Account,
  AccountSchema,
  AccountStatus,
  AnonymousWork,
  type ApiKey,
  ApiKeySchema,
  type AuthService,
  type Identity,
  IdentitySchema,
  KeyStatus,
  WalletFamily,
} from "../../gen/tollgate/auth/v1/auth_pb.js";
import { callerKey, requireOperator, scopedAccount } from "../caller.js";
import { accountNotFound, invalidField, keyLimit, keyNotFound } from "../errors.js";
import { newId } from "../ids.js";
import type { AccountRow, AccountStore, IdentityRow, KeyRow, WalletFamilyText } from "../ports/accounts.js";
import type { AnonymousLimits } from "./anonymous-limits.js";
import type { AuthThrottle } from "./auth-throttle.js";
import type { Authenticator } from "./authenticator.js";
import { isAddress, peerAddressKey } from "./client-address.js";
import { Credential, presentedCredentialKey } from "./credentials.js";
import { provenFacadeKey } from "./facade-proof.js";
import { generateKey } from "./keys.js";
import { csrfTokenFor, type Sessions, type SignInOrigin, sessionInvalid, signInRefused } from "./sessions.js";

/** What the AuthService implementation needs. */
export interface AuthServiceDeps {
  readonly repo: AccountStore;
  readonly authenticator: Authenticator;
  /** Failed key checks and sign-ins, counted per client address. */
  readonly throttle: AuthThrottle;
  readonly sessions: Sessions;
  /**
   * The gateway's public origins (TOLLGATE_PUBLIC_URL's; in dev, the facade's listen origin), the
   * only ones a sign-in message may name unless a proven facade names its own.
   */
  readonly signInOrigins: () => readonly string[];
  readonly now: () => number;
  /** Live (unrevoked) keys an account may have at once (TOLLGATE_MAX_LIVE_KEYS). */
  readonly maxLiveKeys: number;
  /** Work without a key (keyless calls, sign-in nonces), limited per client address. */
  readonly anonymous: AnonymousLimits;
}

const MAX_NAME = 200;
const MAX_REASON = 500;
const DEFAULT_PAGE = 100;
const MAX_PAGE = 1000;
/** Sign-in messages are a few hundred bytes; anything near this is not one. */
const MAX_SIGN_IN_MESSAGE = 4096;

/** The AuthService RPCs over the account store. */
export function createAuthService({
  repo,
  authenticator,
  throttle,
  sessions,
  signInOrigins,
  now,
  maxLiveKeys,
  anonymous,
}: AuthServiceDeps): ServiceImpl<typeof AuthService> {
  const account = async (id: string): Promise<AccountRow> => {
    const row = await repo.getAccount(id);
    if (row === undefined) throw accountNotFound(id);
    return row;
  };

  return {
    async createAccount(req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      const name = text("name", req.name, MAX_NAME);
      return { account: toAccount(await repo.insertAccount(newId("acct"), name, now())) };
    },

    async getAccount(req, ctx) {
      return { account: toAccount(await account(scopedAccount(ctx.values.get(callerKey), req.accountId))) };
    },

    async listAccounts(req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      if (req.pageSize < 0 || req.pageSize > MAX_PAGE) {
        throw invalidField("page_size", `page_size must be between 0 and ${MAX_PAGE}.`);
      }
      const size = req.pageSize === 0 ? DEFAULT_PAGE : req.pageSize;
      const { rows, lastSeq } = await repo.listAccounts(decodePageToken(req.pageToken), size);
      return {
        accounts: rows.map(toAccount),
        nextPageToken: rows.length === size && lastSeq !== undefined ? encodePageToken(lastSeq) : "",
      };
    },

    async suspendAccount(req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      const reason = text("reason", req.reason, MAX_REASON);
      const row = await account(required("account_id", req.accountId));
      if (row.status !== "suspended") await repo.setAccountStatus(row.id, "suspended", reason);
      return { account: toAccount(await account(row.id)) };
    },

    async reactivateAccount(req, ctx) {
      requireOperator(ctx.values.get(callerKey));
      const row = await account(required("account_id", req.accountId));
      if (row.status !== "active") await repo.setAccountStatus(row.id, "active", "");
      return { account: toAccount(await account(row.id)) };
    },

    async createKey(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      const name = text("name", req.name, MAX_NAME);
      await account(accountId);
      const key = generateKey();
      // Capped so that one free sign-in cannot mint keys to multiply the per-key limits.
      const row = await repo.insertKeyWithinCap(
        newId("key"),
        accountId,
        name,
        key.prefix,
        key.digest,
        now(),
        maxLiveKeys,
      );
      if (row === undefined) throw keyLimit(maxLiveKeys);
      return { key: toApiKey(row), secret: key.secret };
    },

    async listKeys(req, ctx) {
      const accountId = scopedAccount(ctx.values.get(callerKey), req.accountId);
      await account(accountId);
      return { keys: (await repo.listKeys(accountId)).map(toApiKey) };
    },

    async revokeKey(req, ctx) {
      const caller = ctx.values.get(callerKey);
      const owner = caller.kind === "operator" ? undefined : scopedAccount(caller, "");
      const id = required("key_id", req.keyId);
      const row = await repo.getKey(id);
      // Another account's key is reported as missing, so key ids cannot be probed.
      if (row === undefined || (owner !== undefined && row.account_id !== owner)) throw keyNotFound(id);
      await repo.revokeKey(id, now());
      return { key: toApiKey((await repo.getKey(id))!) };
    },

    async authenticate(req, ctx) {
      const address = clientAddress(req.clientAddress, ctx);
      // An in-process facade hands over the credential it parsed: its digest is not computed again.
      const presented = handedOverCredential(
        req.key.trim(),
        ctx.values.get(presentedCredentialKey),
        ctx.values.get(provenFacadeKey),
      );
      const key = await throttle.guard(address, () => authenticator.authenticate(presented), presented);
      return {
        principal: {
          accountId: key.accountId,
          keyId: key.keyId,
          accountStatus: AccountStatus.ACTIVE,
          keyStatus: KeyStatus.ACTIVE,
        },
      };
    },

    async createSignInNonce(req, ctx) {
      await anonymous.admit("nonce", clientAddress(req.clientAddress, ctx));
      const { nonce, expiresAt } = await sessions.createNonce();
      return { nonce, expiresAt: timestampFromMs(expiresAt) };
    },

    async signIn(req, ctx) {
      const caller = ctx.values.get(callerKey);
      const family = walletFamily(req.family);
      if (req.message.length > MAX_SIGN_IN_MESSAGE) {
        throw invalidField("message", `message must be at most ${MAX_SIGN_IN_MESSAGE} characters.`);
      }
      const input = {
        family,
        message: req.message,
        signature: required("signature", req.signature),
        expected: expectedOrigins(req.expectedDomain, req.expectedOrigin, ctx, signInOrigins),
      };
      const address = clientAddress(req.clientAddress, ctx);
      if (req.link && caller.kind !== "session") throw sessionInvalid();
      const linkTo = req.link && caller.kind === "session" ? caller.accountId : undefined;
      const { token, view, created } = await throttle.guard(address, () => sessions.signIn(input, linkTo));
      const sessionToken = token ?? (caller.kind === "session" ? caller.token : "");
      return {
        sessionToken: token ?? "",
        csrfToken: sessionToken === "" ? "" : csrfTokenFor(sessionToken),
        account: toAccount(view.account),
        identities: view.identities.map(toIdentity),
        expiresAt: timestampFromMs(view.expiresAt),
        created,
      };
    },

    async getSession(_req, ctx) {
      const caller = ctx.values.get(callerKey);
      if (caller.kind !== "session") throw sessionInvalid();
      const view = await sessions.resolve(caller.token);
      return {
        account: toAccount(view.account),
        identities: view.identities.map(toIdentity),
        csrfToken: csrfTokenFor(caller.token),
        expiresAt: timestampFromMs(view.expiresAt),
      };
    },

    async signOut(_req, ctx) {
      const caller = ctx.values.get(callerKey);
      if (caller.kind === "session") await sessions.end(caller.sessionId);
      return {};
    },

    async admitAnonymous(req, ctx) {
      if (req.work !== AnonymousWork.CALL) {
        throw invalidField("work", "work must be ANONYMOUS_WORK_CALL.");
      }
      await anonymous.admit("call", clientAddress(req.clientAddress, ctx));
      return {};
    },
  };
}

function toAccount(row: AccountRow): Account {
  return create(AccountSchema, {
    id: row.id,
    name: row.name,
    status: row.status === "active" ? AccountStatus.ACTIVE : AccountStatus.SUSPENDED,
    createdAt: timestampFromMs(row.created_at),
    suspendedReason: row.suspended_reason,
  });
}

function walletFamily(family: WalletFamily): WalletFamilyText {
  switch (family) {
    case WalletFamily.EVM:
      return "evm";
    case WalletFamily.SOLANA:
      return "solana";
    default:
      throw invalidField("family", "family must be WALLET_FAMILY_EVM or WALLET_FAMILY_SOLANA.");
  }
}

function toIdentity(row: IdentityRow): Identity {
  return create(IdentitySchema, {
    family: row.family === "evm" ? WalletFamily.EVM : WalletFamily.SOLANA,
    address: row.address,
    linkedAt: timestampFromMs(row.linked_at),
  });
}

function toApiKey(row: KeyRow): ApiKey {
  return create(ApiKeySchema, {
    id: row.id,
    accountId: row.account_id,
    name: row.name,
    prefix: row.prefix,
    status: row.revoked_at === null ? KeyStatus.ACTIVE : KeyStatus.REVOKED,
    createdAt: timestampFromMs(row.created_at),
    lastUsedAt: row.last_used_at === null ? undefined : timestampFromMs(row.last_used_at),
    revokedAt: row.revoked_at === null ? undefined : timestampFromMs(row.revoked_at),
  });
}

/**
 * Whose failures a key check or sign-in counts toward: the client a proven facade names, else the
 * connection's peer (any other network caller: what it names is ignored, so it cannot lock
 * another address out), else none (in process).
 */
function clientAddress(named: string, ctx: HandlerContext): string | undefined {
  if (named === "" || !ctx.values.get(provenFacadeKey)) return ctx.values.get(peerAddressKey);
  if (!isAddress(named)) throw invalidField("client_address", "client_address must be an IP address.");
  return named;
}

/**
 * The domain and origin a sign-in message must name: those a proven facade names (its own
 * configured public URL), else the gateway's configured ones. What any other caller names is
 * ignored: a message signed for its site must not open a session here.
 */
function expectedOrigins(
  domain: string,
  origin: string,
  ctx: HandlerContext,
  configured: () => readonly string[],
): readonly SignInOrigin[] {
  if (ctx.values.get(provenFacadeKey) && domain.trim() !== "") {
    return [{ domain: domain.trim(), origin: required("expected_origin", origin) }];
  }
  const origins = configured().map((url) => ({ domain: new URL(url).host, origin: new URL(url).origin }));
  if (origins.length === 0) {
    throw signInRefused(
      "domain",
      "This gateway has no public origin to sign in to: set TOLLGATE_PUBLIC_URL.",
    );
  }
  return origins;
}

function required(field: string, value: string): string {
  if (value.trim() === "") throw invalidField(field, `${field} is required.`);
  return value.trim();
}

function text(field: string, value: string, max: number): string {
  const trimmed = value.trim();
  if (trimmed.length > max) throw invalidField(field, `${field} must be at most ${max} characters.`);
  return trimmed;
}

function encodePageToken(seq: number): string {
  return Buffer.from(`a:${seq}`).toString("base64url");
}

function decodePageToken(token: string): number {
  if (token === "") return 0;
  const match = /^a:(\d+)$/.exec(Buffer.from(token, "base64url").toString());
  if (match === null) throw invalidField("page_token", "page_token is not one this service issued.");
  return Number(match[1]);
}

/**
 * The credential for `secret`: the one handed over in `values` when it is that secret (and
 * `trusted`, a proven facade's call), else a new one.
 */
function handedOverCredential(
  secret: string,
  handedOver: Credential | undefined,
  trusted: boolean,
): Credential {
  return trusted && handedOver !== undefined && handedOver.secret === secret
    ? handedOver
    : new Credential(secret);
}
