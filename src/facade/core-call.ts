import type { FastifyReply, FastifyRequest } from "fastify";
import { presentedCredential } from "../core/auth/credentials.js";

/** Metadata for core calls: the caller's key (the core authenticates every RPC) and the request id. */
export function coreHeaders(request: FastifyRequest): Record<string, string> {
  return {
    "x-request-id": request.id,
    "x-api-key": presentedCredential((name) => header(request, name) || undefined) ?? "",
  };
}

/** Aborts the core call when the client goes away before the answer is complete. */
export function abortOnDisconnect(reply: FastifyReply): AbortController {
  const abort = new AbortController();
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  return abort;
}

/** A request header as one string ("" when absent; repeated values joined with commas). */
export function header(request: FastifyRequest, name: string): string {
  const value = request.headers[name];
  return (Array.isArray(value) ? value.join(",") : value) ?? "";
}
