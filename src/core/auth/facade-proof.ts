import { Code, createContextKey } from "@connectrpc/connect";
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
