import { setTimeout as sleep } from "node:timers/promises";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  createRouterTransport,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { InferenceService } from "../gen/tollgate/inference/v1/inference_pb.js";
import { createInProcessTransport } from "../serving/in-process-transport.js";
import { createCoreClient } from "./core-client.js";

/** A CreateMessage that yields `parts` comments, sets a header and a trailer, and records its end. */
function probeService(parts: number, failAfter?: number) {
  const probe = { produced: 0, finished: false, sawAbort: false, input: "" };
  const routes = (router: ConnectRouter) => {
    router.service(InferenceService, {
      async *createMessage(req, ctx) {
        probe.input = req.anthropicVersion;
        ctx.responseHeader.set("x-probe", "head");
        try {
          for (let i = 0; i < parts; i++) {
            if (i === failAfter) throw new ConnectError("upstream broke", Code.Unavailable);
            probe.produced++;
            yield { part: { case: "comment", value: `part ${i}` } };
          }
          ctx.responseTrailer.set("x-probe-end", "tail");
        } finally {
          probe.sawAbort = ctx.signal.aborted;
          probe.finished = true;
        }
      },
    });
  };
  return { probe, routes };
}

const transports: Record<
  string,
  (routes: (router: ConnectRouter) => void, interceptors?: Interceptor[]) => Transport
> = {
  "in process": (routes, interceptors = []) => createInProcessTransport(routes, interceptors),
  "over Connect's router transport": (routes, interceptors = []) =>
    createRouterTransport(routes, { router: { interceptors } }),
};

describe.each(Object.entries(transports))("the facade's core client, %s", (_name, transportFor) => {
  it("streams every response in order, with the response's header and trailer", async () => {
    const { probe, routes } = probeService(3);
    const client = createCoreClient(InferenceService, transportFor(routes));
    const seen: { header?: Headers; trailer?: string | null } = {};
    const parts: string[] = [];
    for await (const response of client.createMessage(
      { anthropicVersion: "2023-06-01" },
      {
        onHeader: (header) => {
          // The in-process header is the call's own, filled as the implementation runs.
          seen.header = header;
        },
        onTrailer: (trailer) => {
          seen.trailer = trailer.get("x-probe-end");
        },
      },
    )) {
      parts.push(response.part.case === "comment" ? response.part.value : "?");
    }
    expect(parts).toEqual(["part 0", "part 1", "part 2"]);
    expect(seen.header?.get("x-probe")).toBe("head");
    expect(seen.trailer).toBe("tail");
    expect(probe.input).toBe("2023-06-01");
    expect(probe.finished).toBe(true);
  });

  it("throws the implementation's error as a ConnectError with its code, after the parts before it", async () => {
    const { routes } = probeService(3, 1);
    const client = createCoreClient(InferenceService, transportFor(routes));
    const parts: string[] = [];
    const failed = (async () => {
      for await (const response of client.createMessage({})) parts.push(response.part.case ?? "");
    })();
    await expect(failed).rejects.toMatchObject({ code: Code.Unavailable, rawMessage: "upstream broke" });
    expect(parts).toEqual(["comment"]);
  });

  it("fails with an interceptor's error before any part", async () => {
    const { probe, routes } = probeService(3);
    const refuse: Interceptor = () => async () => {
      throw new ConnectError("no key", Code.Unauthenticated);
    };
    const client = createCoreClient(InferenceService, transportFor(routes, [refuse]));
    const iterator = client.createMessage({})[Symbol.asyncIterator]();
    await expect(iterator.next()).rejects.toMatchObject({ code: Code.Unauthenticated });
    expect(probe.produced).toBe(0);
  });
});

// Connect's router transport (and so its own client over it) does not end the implementation on
// an abort before the next pull; the in-process transport does, which the facade relies on.
describe("the facade's core client, in process, aborted", () => {
  it("ends the implementation (its finally runs) when the call's signal aborts mid-stream", async () => {
    const { probe, routes } = probeService(1000);
    const client = createCoreClient(InferenceService, createInProcessTransport(routes, []));
    const abort = new AbortController();
    const iterator = client.createMessage({}, { signal: abort.signal })[Symbol.asyncIterator]();
    await iterator.next();
    abort.abort();
    for (let i = 0; i < 50 && !probe.finished; i++) await sleep(2);
    expect(probe.finished).toBe(true);
    expect(probe.sawAbort).toBe(true);
    expect(probe.produced).toBeLessThan(1000);
  });
});
