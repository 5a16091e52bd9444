import type { Client } from "@connectrpc/connect";
import type { FastifyRequest, onRequestHookHandler } from "fastify";
import { presentedCredential } from "../core/auth/credentials.js";
import type { AuthService, Principal } from "../gen/tollgate/auth/v1/auth_pb.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the authentication hook on every authenticated route. */
    principal: Principal | null;
    /** The gateway's public origin for links in answers (TOLLGATE_PUBLIC_URL, else this request's). */
    publicOrigin: string;
  }
}

/**
 * An onRequest hook that authenticates the presented key through the core before the body is
 * read, so an unauthenticated caller never costs a body parse. Errors reach the scope's own
 * error handler, which answers in that format's envelope.
 */
export function authenticateHook(auth: Client<typeof AuthService>): onRequestHookHandler {
  return async (request: FastifyRequest) => {
    const key = presentedCredential((name) => headerValue(request, name)) ?? "";
    const { principal } = await auth.authenticate({ key }, { headers: { "x-request-id": request.id } });
    request.principal = principal ?? null;
  };
}

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
}
