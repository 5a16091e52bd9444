import { createHash, timingSafeEqual } from "node:crypto";
import {
  createContextKey,
  type Interceptor,
  type StreamRequest,
  type UnaryRequest,
} from "@connectrpc/connect";
import type { AuthThrottle } from "./auth/auth-throttle.js";
import type { AuthenticatedKey, Authenticator } from "./auth/authenticator.js";
import { peerAddressKey } from "./auth/client-address.js";
import { Credential, presentedCredential, presentedCredentialKey } from "./auth/credentials.js";
import { FACADE_TOKEN_HEADER, facadeTokenInvalid, provenFacadeKey } from "./auth/facade-proof.js";
import { KEY_PREFIX } from "./auth/keys.js";
import { SESSION_HEADER, type Sessions } from "./auth/sessions.js";
import { invalidField, keyMissing, operatorOnly, otherAccount } from "./errors.js";

/**
 * Who is calling the core: nobody in particular, the operator, the holder of an API key, or a
 * dashboard session (which acts on its account as one of its keys would).
 */
export type Caller =
  | { readonly kind: "anonymous" }
  | { readonly kind: "operator" }
  | { readonly kind: "key"; readonly key: AuthenticatedKey }
  | {
      readonly kind: "session";
      readonly accountId: string;
      readonly sessionId: string;
      /** The session token as presented: the CSRF token derives from it. */
      readonly token: string;
    };

/** The caller of the current RPC, set by {@link callerInterceptor}. */
export const callerKey = createContextKey<Caller>({ kind: "anonymous" }, { description: "caller" });

/**
 * Resolves the caller of one RPC from its request metadata (asynchronously when it asks the
 * store); `peer` is the address of the connection it came on (undefined in process).
 */
export type CallerResolver = (header: Headers, peer: string | undefined) => Caller | Promise<Caller>;

/**
 * A caller the facade already authenticated for this call, handed over by an in-process
 * transport. Only code in this process can set a context value (a network request starts with
 * fresh ones), so the core takes it instead of authenticating the same key a second time.
 *
 * The flow of a keyed call: the facade parses the credential once (facade/authenticate.ts) and
 * authenticates it with the Authenticate RPC, handing the parsed credential along
 * (credentials.ts, `presentedCredentialKey`) so its digest is computed once; every later RPC of
 * the request hands over the authenticated caller here (facade/core-call.ts). A remote facade's
 * calls, and any gRPC or Connect client of the core's port, carry the key in their metadata
 * instead: {@link headerCallerResolver} parses it there, the core's one conversion at its edge.
 */
export const authenticatedCallerKey = createContextKey<Caller | undefined>(undefined, {
  description: "caller authenticated in process",
});

/**
 * A server interceptor that establishes who calls, once per RPC, and puts it in the context
 * values. First whether a network call comes from a facade tier: one presenting `facadeToken` in
 * {@link FACADE_TOKEN_HEADER} (compared in constant time) is a proven facade; any other value
 * fails the call, so a mistyped token never silently downgrades a facade tier to an anonymous
 * caller; without a configured token no network caller is a facade. (In-process calls are proven
 * by their transport.) Then the caller: the one a proven facade handed over, else the credential
 * in the request metadata. An in-process Authenticate, which hands over the credential it is
 * about (`presentedCredentialKey`), carries none in its metadata: it is anonymous unread. With
 * `mask`, every failure of the call (these checks' and its handler's) is thrown as `mask` turns it.
 */
export function callerInterceptor(
  resolve: CallerResolver,
  facadeToken?: string,
  mask?: (error: unknown, req: UnaryRequest | StreamRequest) => unknown,
): Interceptor {
  const expected = facadeToken === undefined ? undefined : sha256(facadeToken);
  const intercept: Interceptor = (next) => async (req) => {
    const presented = req.header.get(FACADE_TOKEN_HEADER);
    if (presented !== null) {
      if (expected === undefined || !timingSafeEqual(sha256(presented), expected)) throw facadeTokenInvalid();
      req.contextValues.set(provenFacadeKey, true);
    }
    // Only a proven facade vouches for a caller; anyone else is resolved from what it presents.
    const proven = req.contextValues.get(provenFacadeKey);
    const handedOver = proven ? req.contextValues.get(authenticatedCallerKey) : undefined;
    req.contextValues.set(
      callerKey,
      handedOver ??
        (proven && req.contextValues.get(presentedCredentialKey) !== undefined
          ? ANONYMOUS
          : await resolve(req.header, req.contextValues.get(peerAddressKey))),
    );
    return await next(req);
  };
  if (mask === undefined) return intercept;
  return (next) => {
    const inner = intercept(next);
    return async (req) => {
      try {
        return await inner(req);
      } catch (error) {
        throw mask(error, req);
      }
    };
  };
}

const ANONYMOUS: Caller = { kind: "anonymous" };

/**
 * The network resolver: a dashboard session (`x-tollgate-session`) as its account; an API key
 * (`tg_…`) as its account; the operator token (when configured) as the operator; no credential
 * is anonymous. A presented credential that is none of these fails the call, so a typo never
 * silently downgrades to anonymous. Keys and the operator token are checked under the throttle
 * on failed authentications, by the peer's address.
 */
export function headerCallerResolver(
  authenticator: Authenticator,
  throttle: AuthThrottle,
  adminToken: string | undefined,
  sessions?: Sessions,
): CallerResolver {
  const adminDigest = adminToken === undefined ? undefined : sha256(adminToken);
  const credentialCaller = async (credential: Credential): Promise<Caller> => {
    if (adminDigest !== undefined && !credential.secret.startsWith(KEY_PREFIX)) {
      if (timingSafeEqual(credential.digest, adminDigest)) return { kind: "operator" };
    }
    return { kind: "key", key: await authenticator.authenticate(credential) };
  };
  return async (header, peer) => {
    const sessionToken = header.get(SESSION_HEADER);
    if (sessionToken !== null && sessions !== undefined) {
      const session = await sessions.resolve(sessionToken);
      return {
        kind: "session",
        accountId: session.account.id,
        sessionId: session.sessionId,
        token: sessionToken,
      };
    }
    const presented = presentedCredential((name) => header.get(name));
    if (presented === undefined) return { kind: "anonymous" };
    const credential = new Credential(presented);
    return await throttle.guard(peer, () => credentialCaller(credential), credential);
  };
}

/** The in-process resolver for the operator CLI, which owns the database it opened. */
export const operatorCallerResolver: CallerResolver = () => ({ kind: "operator" });

/** Fails unless the caller is the operator. */
export function requireOperator(caller: Caller): void {
  if (caller.kind !== "operator") throw caller.kind === "anonymous" ? keyMissing() : operatorOnly();
}

/**
 * The account an RPC acts on: a key holder's own (an explicit other id is refused), or the one
 * the operator names.
 */
export function scopedAccount(caller: Caller, requested: string): string {
  switch (caller.kind) {
    case "operator":
      if (requested === "") throw invalidField("account_id", "account_id is required for operator calls.");
      return requested;
    case "key":
      if (requested !== "" && requested !== caller.key.accountId) throw otherAccount();
      return caller.key.accountId;
    case "session":
      if (requested !== "" && requested !== caller.accountId) throw otherAccount();
      return caller.accountId;
    case "anonymous":
      throw keyMissing();
  }
}

function sha256(value: string): Buffer {
  return createHash("sha256").update(value).digest();
}
