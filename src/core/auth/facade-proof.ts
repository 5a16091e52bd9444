import { createHash, timingSafeEqual } from "node:crypto";
import { Code, createContextKey, type Interceptor } from "@connectrpc/connect";
import { reasonError } from "../errors.js";

/**
 * The request header a facade tier presents its service token in (TOLLGATE_FACADE_TOKEN) when it
 * calls a core over the network.
 */
export const FACADE_TOKEN_HEADER = "x-tollgate-facade";

/**
 * Whether the current RPC comes from a facade the core trusts with the fields only a facade may
 * assert (a request's `client_address`, a sign-in's `expected_domain` and `expected_origin`, the
 * caller it authenticated): true for calls through the in-process transport (only code in this
 * process holds it) and for network calls that presented the facade token; false for everyone
 * else, whose such fields are ignored.
 */
export const provenFacadeKey = createContextKey(false, { description: "proven facade" });

/** The facade token was presented but is not this core's: a misconfigured tier, said loudly. */
export const facadeTokenInvalid = () =>
  reasonError(
    Code.Unauthenticated,
    "FACADE_TOKEN_INVALID",
    `The ${FACADE_TOKEN_HEADER} token is not this core's TOLLGATE_FACADE_TOKEN.`,
  );

/**
 * A server interceptor that marks a network call as a proven facade's when it presents `token`
 * in {@link FACADE_TOKEN_HEADER} (compared in constant time), and fails a call presenting any
 * other value, so a mistyped token never silently downgrades a facade tier to an anonymous
 * caller. Without a configured token, no network caller is a facade, and the header is refused.
 */
export function facadeProofInterceptor(token: string | undefined): Interceptor {
  const expected = token === undefined ? undefined : sha256(token);
  return (next) => async (req) => {
    const presented = req.header.get(FACADE_TOKEN_HEADER);
    if (presented !== null) {
      if (expected === undefined || !timingSafeEqual(sha256(presented), expected)) throw facadeTokenInvalid();
      req.contextValues.set(provenFacadeKey, true);
    }
    return await next(req);
  };
}

function sha256(value: string): Buffer {
  return createHash("sha256").update(value).digest();
}
