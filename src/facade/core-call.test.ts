import { create } from "@bufbuild/protobuf";
import { type ConnectRouter, createClient, createRouterTransport } from "@connectrpc/connect";
import type { FastifyRequest } from "fastify";
import { describe, expect, it } from "vitest";
import { Credential } from "../core/auth/credentials.js";
import { authenticatedCallerKey, type Caller, callerInterceptor, callerKey } from "../core/caller.js";
import { CheckResponseSchema, HealthService } from "../gen/tollgate/health/v1/health_pb.js";
import { createInProcessTransport } from "../serving/in-process-transport.js";
import type { AuthenticatedCaller } from "./authenticate.js";
import { coreCall, remoteCoreTransport } from "./core-call.js";

const secret = "tg_secret";

/** Just what coreCall reads of a request. */
function request(caller: AuthenticatedCaller | null): FastifyRequest {
  return { id: "req_1", publicOrigin: "https://gw.example", caller } as unknown as FastifyRequest;
}

const authenticated: AuthenticatedCaller = {
  credential: new Credential(secret),
  accountId: "acct_a",
  keyId: "key_a",
};

/** A health service that answers with the `x-api-key` it was sent and the caller it resolved. */
function probe(seen: { key: string | null; caller?: Caller }) {
  return (router: ConnectRouter) =>
    router.service(HealthService, {
      check(_req, ctx) {
        seen.key = ctx.requestHeader.get("x-api-key");
        seen.caller = ctx.values.get(callerKey);
        return create(CheckResponseSchema, {});
      },
    });
}

describe("core calls carry the authenticated caller once", () => {
  it("sends no key in the metadata: the caller goes as a context value", () => {
    const options = coreCall(request(authenticated));
    expect(options.headers).toEqual({ "x-request-id": "req_1", "x-gateway-origin": "https://gw.example" });
    expect(options.contextValues?.get(authenticatedCallerKey)).toEqual({
      kind: "key",
      key: { accountId: "acct_a", keyId: "key_a" },
    });
    expect(coreCall(request(null)).contextValues).toBeUndefined();
  });

  it("an in-process core takes the handed-over caller, and no x-api-key reaches it", async () => {
    const seen: { key: string | null; caller?: Caller } = { key: "unset" };
    const resolveFromHeaders = () => ({ kind: "anonymous" }) as const;
    const transport = createInProcessTransport(probe(seen), [callerInterceptor(resolveFromHeaders)]);
    await createClient(HealthService, transport).check({}, coreCall(request(authenticated)));
    expect(seen.key).toBeNull();
    expect(seen.caller).toEqual({ kind: "key", key: { accountId: "acct_a", keyId: "key_a" } });
  });

  it("a remote core gets the key as x-api-key, only for a call that hands over a caller", async () => {
    const seen: { key: string | null } = { key: "unset" };
    const client = createClient(HealthService, remoteCoreTransport(createRouterTransport(probe(seen))));
    await client.check({}, coreCall(request(authenticated)));
    expect(seen.key).toBe(secret);
    await client.check({}, coreCall(request(null)));
    expect(seen.key).toBeNull();
  });
});
