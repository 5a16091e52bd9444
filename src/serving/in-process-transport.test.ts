import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  createClient,
  createContextValues,
  createRouterTransport,
} from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { authenticatedCallerKey, type Caller, callerInterceptor, callerKey } from "../core/caller.js";
import { errorInfo, invalidField, toConnectError } from "../core/errors.js";
import { CheckResponseSchema, HealthService } from "../gen/tollgate/health/v1/health_pb.js";
import { InferenceService } from "../gen/tollgate/inference/v1/inference_pb.js";
import { createInProcessTransport, IN_PROCESS_PROTOCOL } from "./in-process-transport.js";

/** A stream implementation that records how far it got and whether its finally ran. */
function streamProbe(parts: number) {
  const probe = { produced: 0, finished: false, sawAbort: false };
  const routes = (router: ConnectRouter) => {
    router.service(InferenceService, {
      async *createMessage(_req, ctx) {
        try {
          for (let i = 0; i < parts; i++) {
            probe.produced++;
            yield { part: { case: "comment", value: `part ${i}` } };
          }
        } finally {
          probe.sawAbort = ctx.signal.aborted;
          probe.finished = true;
        }
      },
    });
  };
  return { probe, client: createClient(InferenceService, createInProcessTransport(routes, [])) };
}

describe("authenticating once per call", () => {
  const key: Caller = { kind: "key", key: { accountId: "acct_a", keyId: "key_a" } };
  function counted() {
    const seen: Caller[] = [];
    let resolved = 0;
    const routes = (router: ConnectRouter) => {
      router.service(HealthService, {
        check(_req, ctx) {
          seen.push(ctx.values.get(callerKey));
          return { ready: true };
        },
      });
    };
    const resolve = (): Caller => {
      resolved++;
      return { kind: "anonymous" };
    };
    return { seen, routes, resolve, resolvedCount: () => resolved };
  }

  it("takes the caller the facade authenticated in process, without resolving it again", async () => {
    const t = counted();
    const client = createClient(
      HealthService,
      createInProcessTransport(t.routes, [callerInterceptor(t.resolve)]),
    );
    await client.check({}, { contextValues: createContextValues().set(authenticatedCallerKey, key) });
    expect(t.seen).toEqual([key]);
    expect(t.resolvedCount()).toBe(0);
    // Without it, the metadata decides, once.
    await client.check({});
    expect(t.seen[1]).toEqual({ kind: "anonymous" });
    expect(t.resolvedCount()).toBe(1);
  });

  it("a client over a network transport cannot hand one over: the server resolves the metadata", async () => {
    const t = counted();
    const client = createClient(
      HealthService,
      createRouterTransport(t.routes, { router: { interceptors: [callerInterceptor(t.resolve)] } }),
    );
    await client.check({}, { contextValues: createContextValues().set(authenticatedCallerKey, key) });
    expect(t.seen).toEqual([{ kind: "anonymous" }]);
    expect(t.resolvedCount()).toBe(1);
  });
});

describe("createInProcessTransport", () => {
  it("runs the core's interceptors on each call, with the request's headers, and returns the implementation's message", async () => {
    const seen: { caller?: Caller; protocol?: string; url?: string } = {};
    const routes = (router: ConnectRouter) => {
      router.service(HealthService, {
        check(_req, ctx) {
          seen.caller = ctx.values.get(callerKey);
          seen.protocol = ctx.protocolName;
          seen.url = ctx.url;
          ctx.responseHeader.set("x-seen", ctx.requestHeader.get("x-api-key") ?? "");
          return { ready: true };
        },
      });
    };
    const resolve = (header: Headers): Caller =>
      header.get("x-api-key") === "operator" ? { kind: "operator" } : { kind: "anonymous" };
    const client = createClient(
      HealthService,
      createInProcessTransport(routes, [callerInterceptor(resolve)]),
    );
    let responseHeader: Headers | undefined;
    const res = await client.check(
      {},
      {
        headers: { "x-api-key": "operator" },
        onHeader: (h) => {
          responseHeader = h;
        },
      },
    );
    expect(res).toEqual(create(CheckResponseSchema, { ready: true }));
    expect(seen).toEqual({
      caller: { kind: "operator" },
      protocol: IN_PROCESS_PROTOCOL,
      url: "/tollgate.health.v1.HealthService/Check",
    });
    expect(responseHeader?.get("x-seen")).toBe("operator");
  });

  it("hands errors to the caller as ConnectErrors with their code and reason, and masks the unexpected", async () => {
    const masked: unknown[] = [];
    const routes = (router: ConnectRouter) => {
      router.service(HealthService, {
        check(_req, ctx) {
          if (ctx.requestHeader.get("x-mode") === "bad") throw invalidField("service", "no such service");
          throw new Error("disk on fire");
        },
      });
    };
    const client = createClient(
      HealthService,
      createInProcessTransport(routes, [
        (next) => async (req) => {
          try {
            return await next(req);
          } catch (error) {
            const connect = toConnectError(error);
            if (connect !== error) masked.push(error);
            throw connect;
          }
        },
      ]),
    );
    const expected = await client.check({}, { headers: { "x-mode": "bad" } }).catch((e: unknown) => e);
    expect(expected).toBeInstanceOf(ConnectError);
    expect((expected as ConnectError).code).toBe(Code.InvalidArgument);
    expect(errorInfo(expected as ConnectError)?.reason).toBe("INVALID_FIELD");
    const unexpected = await client.check({}).catch((e: unknown) => e);
    expect((unexpected as ConnectError).code).toBe(Code.Internal);
    expect((unexpected as ConnectError).rawMessage).not.toContain("disk on fire");
    expect(masked).toHaveLength(1);
  });

  it("answers a method with no implementation as unimplemented", async () => {
    const client = createClient(
      HealthService,
      createInProcessTransport(() => {}, []),
    );
    const error = await client.check({}).catch((e: unknown) => e);
    expect((error as ConnectError).code).toBe(Code.Unimplemented);
  });

  it("streams on demand: the implementation runs only as far as the consumer pulled", async () => {
    const { probe, client } = streamProbe(10);
    const iterator = client.createMessage({})[Symbol.asyncIterator]();
    await iterator.next();
    await iterator.next();
    await sleep(10);
    expect(probe.produced).toBe(2);
    for (let r = await iterator.next(); r.done !== true; r = await iterator.next());
    expect(probe).toEqual({ produced: 10, finished: true, sawAbort: false });
  });

  it("ends an abandoned stream when its signal aborts, so the implementation's finally runs", async () => {
    const { probe, client } = streamProbe(10);
    const abort = new AbortController();
    const iterator = client.createMessage({}, { signal: abort.signal })[Symbol.asyncIterator]();
    await iterator.next();
    await iterator.next();
    expect(probe.finished).toBe(false);
    abort.abort();
    for (let i = 0; i < 20 && !probe.finished; i++) await sleep(5);
    expect(probe).toEqual({ produced: 2, finished: true, sawAbort: true });
  });

  it("ends a stream at its deadline", async () => {
    const { probe, client } = streamProbe(10);
    const iterator = client.createMessage({}, { timeoutMs: 30 })[Symbol.asyncIterator]();
    await iterator.next();
    await sleep(80);
    expect(probe).toEqual({ produced: 1, finished: true, sawAbort: true });
  });
});
