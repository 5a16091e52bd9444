import { createClient, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../gen/tollgate/billing/v1/billing_pb.js";

/** The session's CSRF token, learnt from SignIn or GetSession; sent on every call. */
let csrfToken = "";

/** Remembers the CSRF token the core returned for this session. */
export function setCsrfToken(token: string): void {
  csrfToken = token;
}

const csrf: Interceptor = (next) => async (req) => {
  if (csrfToken !== "") req.header.set("x-csrf-token", csrfToken);
  return await next(req);
};

// The typed core through the facade's HTTP/1.1 bridge; the session rides in its HttpOnly cookie.
const transport = createConnectTransport({
  baseUrl: `${location.origin}/dashboard/rpc`,
  interceptors: [csrf],
  fetch: (input, init) => fetch(input, { ...init, credentials: "same-origin" }),
});

/** AuthService: sign-in, session, keys. */
export const auth = createClient(AuthService, transport);
/** BillingService: pricing, balances, default chain, usage. */
export const billing = createClient(BillingService, transport);
