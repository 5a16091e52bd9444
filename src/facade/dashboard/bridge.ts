import type { DescService } from "@bufbuild/protobuf";
import {
  type CallOptions,
  type Client,
  Code,
  ConnectError,
  type ConnectRouter,
  createClient,
  createContextKey,
  type HandlerContext,
  type ServiceImpl,
  type Transport,
} from "@connectrpc/connect";
import { parse as parseCookies, serialize as serializeCookie } from "cookie";
import { csrfTokenFor, SESSION_HEADER, SESSION_TTL_MS, sessionInvalid } from "../../core/auth/sessions.js";
import { errorInfo, reasonError } from "../../core/errors.js";
import { AuthService } from "../../gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { anonymousRefusals } from "../anonymous-limits.js";

/** Where the dashboard's Connect handlers are mounted on the facade. */
export const DASHBOARD_RPC_PREFIX = "/dashboard/rpc";
/** The HttpOnly cookie that holds the session token; the page's script never sees it. */
export const SESSION_COOKIE = "tollgate_session";
/** The header the page sends its CSRF token in, on every state-changing call. */
export const CSRF_HEADER = "x-csrf-token";
/** The browser's address, set by the dashboard plugin: failed sign-ins are throttled by it. */
export const clientAddressKey = createContextKey("", { description: "client address" });

/**
 * How the bridge treats one RPC: `public` needs no session; `read` forwards the session;
 * `write` also needs the session's CSRF token.
 */
type Policy = "public" | "read" | "write";

// The dashboard's share of the core, and nothing more: operator RPCs, the internal billing
// RPCs and inference are not reachable with a session cookie.
const AUTH_POLICIES = {
  createSignInNonce: "public",
  getSession: "read",
  getAccount: "read",
  createKey: "write",
  listKeys: "read",
  revokeKey: "write",
} as const satisfies Partial<Record<keyof ServiceImpl<typeof AuthService>, Policy>>;

const BILLING_POLICIES = {
  getPricing: "public",
  getBalances: "read",
  setDefaultChain: "write",
  listUsage: "read",
  getDepositAddresses: "read",
  listDeposits: "read",
  listWithdrawals: "read",
  withdraw: "write",
  requestTestFunds: "write",
  prepareFunding: "read",
  setSpendCap: "write",
  listSpendCaps: "read",
  getReceipt: "read",
  getReceiptKeys: "public",
} as const satisfies Partial<Record<keyof ServiceImpl<typeof BillingService>, Policy>>;

/** What the bridge needs: the facade's transport to the core, and the public origin if configured (TOLLGATE_PUBLIC_URL). */
export interface DashboardBridgeDeps {
  readonly transport: Transport;
  readonly publicUrl: URL | undefined;
}

/**
 * The Connect routes the dashboard calls over HTTP/1.1 (browsers speak no cleartext HTTP/2).
 * Each forwards to the core through the facade's typed client, presenting the session cookie's
 * token as `x-tollgate-session`; sign-in and sign-out also set and clear that cookie.
 */
export function dashboardRoutes({
  transport,
  publicUrl,
}: DashboardBridgeDeps): (router: ConnectRouter) => void {
  const auth = createClient(AuthService, transport);
  const billing = createClient(BillingService, transport);
  const secure = publicUrl?.protocol === "https:";
  const refusedNonces = anonymousRefusals("nonce");

  const authImpl: Partial<ServiceImpl<typeof AuthService>> = {
    ...forward(auth, AUTH_POLICIES),
    // Nonces are limited per client address: the core is told the browser's.
    // An address over its limit is refused here until its window ends (no RPC), each refusal
    // held back a second, so a flood of nonce requests does not slow other callers down.
    async createSignInNonce(_req, ctx) {
      const address = ctx.values.get(clientAddressKey);
      const refusal = refusedNonces.refusal(address);
      if (refusal !== undefined) {
        await refusedNonces.holdBack();
        throw withRetryAfter(refusal);
      }
      try {
        return await auth.createSignInNonce({ clientAddress: address }, callOptions(ctx, undefined));
      } catch (error) {
        refusedNonces.remember(address, error);
        throw withRetryAfter(error);
      }
    },
    async signIn(req, ctx) {
      const token = sessionToken(ctx);
      if (req.link) requireCsrf(ctx, token);
      // Where the message must point comes from configuration only, never from the request's
      // Host (a page elsewhere could have a wallet sign for its own site and replay it here):
      // the configured public URL, else nothing, and the core checks its own (dev: listen) origin.
      const res = await auth.signIn(
        {
          ...req,
          expectedDomain: publicUrl?.host ?? "",
          expectedOrigin: publicUrl?.origin ?? "",
          clientAddress: ctx.values.get(clientAddressKey),
        },
        callOptions(ctx, token),
      );
      if (res.sessionToken !== "") {
        ctx.responseHeader.append(
          "set-cookie",
          serializeCookie(SESSION_COOKIE, res.sessionToken, {
            httpOnly: true,
            sameSite: "strict",
            secure,
            path: "/dashboard",
            maxAge: SESSION_TTL_MS / 1000,
          }),
        );
      }
      // The token stays in the cookie; the page gets everything else.
      return { ...res, sessionToken: "" };
    },
    async signOut(_req, ctx) {
      const token = sessionToken(ctx);
      if (token !== undefined) {
        requireCsrf(ctx, token);
        await auth.signOut({}, callOptions(ctx, token));
      }
      ctx.responseHeader.append(
        "set-cookie",
        serializeCookie(SESSION_COOKIE, "", {
          httpOnly: true,
          sameSite: "strict",
          secure,
          path: "/dashboard",
          maxAge: 0,
        }),
      );
      return {};
    },
  };

  return (router) => {
    router.service(AuthService, authImpl);
    router.service(BillingService, forward(billing, BILLING_POLICIES));
  };
}

/** Handlers that forward each listed method to the core under its policy. */
function forward<S extends DescService>(
  client: Client<S>,
  policies: Partial<Record<keyof ServiceImpl<S>, Policy>>,
): Partial<ServiceImpl<S>> {
  const calls = client as unknown as Record<string, (req: unknown, options: CallOptions) => Promise<unknown>>;
  const impl: Record<string, (req: unknown, ctx: HandlerContext) => Promise<unknown>> = {};
  for (const [name, policy] of Object.entries(policies) as [string, Policy][]) {
    const call = calls[name]!;
    impl[name] = async (req, ctx) => {
      const token = policy === "public" ? undefined : sessionToken(ctx);
      if (policy !== "public" && token === undefined) throw signedOut();
      if (policy === "write") requireCsrf(ctx, token);
      return await call(req, callOptions(ctx, token));
    };
  }
  return impl as Partial<ServiceImpl<S>>;
}

function callOptions(ctx: HandlerContext, token: string | undefined): CallOptions {
  return { signal: ctx.signal, headers: token === undefined ? {} : { [SESSION_HEADER]: token } };
}

function sessionToken(ctx: HandlerContext): string | undefined {
  const header = ctx.requestHeader.get("cookie");
  if (header === null) return undefined;
  const token = parseCookies(header)[SESSION_COOKIE];
  return token === undefined || token === "" ? undefined : token;
}

/** A state-changing call must echo the session's CSRF token, which only the page can know. */
function requireCsrf(ctx: HandlerContext, token: string | undefined): void {
  if (token === undefined) throw signedOut();
  if (ctx.requestHeader.get(CSRF_HEADER) !== csrfTokenFor(token)) {
    throw reasonError(
      Code.PermissionDenied,
      "CSRF_TOKEN_INVALID",
      `Missing or wrong ${CSRF_HEADER}: reload the dashboard and try again.`,
    );
  }
}

/**
 * A refusal that says when to come back (a limit's `retry_after`) carries it as the HTTP
 * `retry-after` header too, where browsers and HTTP clients look for it; Connect sends an
 * error's metadata as response headers.
 */
function withRetryAfter(error: unknown): unknown {
  if (!(error instanceof ConnectError)) return error;
  const retryAfter = errorInfo(error)?.metadata.retry_after;
  if (retryAfter !== undefined) error.metadata.set("retry-after", retryAfter);
  return error;
}

function signedOut(): ConnectError {
  return sessionInvalid();
}
