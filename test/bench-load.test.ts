import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openLoop, type RequestSpec, saturate } from "../bench/load.js";

/**
 * A real HTTP server that counts the requests of each (x-api-key, authorization, content-type) by
 * path: each test has a path of its own, so a request still in flight when autocannon resolves
 * counts for its own test, never the next.
 */
let server: Server;
const byPath = new Map<string, Map<string, number>>();
const seen = (path: string) => byPath.get(path) ?? new Map<string, number>();
let url = "";
let slowStartFrom: number | undefined;

beforeAll(async () => {
  server = createServer((request, response) => {
    request.resume();
    if (request.url === "/refused") {
      response.statusCode = 503;
      response.end("{}");
      return;
    }
    if (request.url === "/dropped") {
      request.socket.destroy();
      return;
    }
    if (request.url === "/slow-start") {
      // The first 600 ms of the run (60 of its first 100 requests) answered 80 ms late.
      slowStartFrom ??= Date.now();
      const late = Date.now() - slowStartFrom < 600;
      setTimeout(() => response.end("{}"), late ? 80 : 0);
      return;
    }
    request.on("end", () => {
      const who = `${request.headers["x-api-key"]} | ${request.headers.authorization} | ${request.headers["content-type"]}`;
      const counts = seen(request.url!);
      counts.set(who, (counts.get(who) ?? 0) + 1);
      byPath.set(request.url!, counts);
      response.end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

const spec = (path: string, headerSets?: RequestSpec["headerSets"]): RequestSpec => ({
  url,
  path,
  headers: { "content-type": "application/json", "x-api-key": "one", authorization: "Bearer one" },
  ...(headerSets === undefined ? {} : { headerSets }),
  body: "{}",
});

const keys = ["a", "b", "c"].map((key) => ({ "x-api-key": key, authorization: `Bearer ${key}` }));

describe("the load generator's header sets (bench/load.ts)", () => {
  it("takes the sets in turn in an open loop, each over the common headers", async () => {
    const result = await openLoop({
      kind: "rate",
      request: spec("/open", keys),
      rate: 150,
      seconds: 1,
      connections: 8,
    });
    expect(result.requests).toBe(150);
    expect(Object.fromEntries(seen("/open"))).toEqual({
      "a | Bearer a | application/json": 50,
      "b | Bearer b | application/json": 50,
      "c | Bearer c | application/json": 50,
    });
  });

  it("spreads a saturating run's requests over every set, on every connection", async () => {
    const result = await saturate({
      kind: "saturate",
      request: spec("/closed", keys),
      connections: 4,
      seconds: 1,
    });
    const counts = [...seen("/closed").entries()];
    expect(counts.map(([who]) => who).sort()).toEqual([
      "a | Bearer a | application/json",
      "b | Bearer b | application/json",
      "c | Bearer c | application/json",
    ]);
    // One counter for all connections: the sets differ by at most the requests in flight.
    const sent = counts.reduce((n, [, count]) => n + count, 0);
    expect(sent).toBeGreaterThanOrEqual(result.requests);
    for (const [, count] of counts) expect(Math.abs(count - sent / 3)).toBeLessThanOrEqual(4);
  });

  it("sends the common headers alone without sets", async () => {
    await openLoop({ kind: "rate", request: spec("/one"), rate: 50, seconds: 1, connections: 4 });
    await saturate({ kind: "saturate", request: spec("/one"), connections: 2, seconds: 1 });
    expect([...seen("/one").keys()]).toEqual(["one | Bearer one | application/json"]);
  });
});

describe("the load generator's open loop (bench/load.ts)", () => {
  it("counts answers outside 2xx and requests that fail, one each", async () => {
    const refused = await openLoop({
      kind: "rate",
      request: spec("/refused"),
      rate: 40,
      seconds: 0.5,
      connections: 4,
    });
    expect(refused).toMatchObject({ requests: 20, non2xx: 20, errors: 0 });
    const dropped = await openLoop({
      kind: "rate",
      request: spec("/dropped"),
      rate: 40,
      seconds: 0.5,
      connections: 4,
    });
    expect(dropped).toMatchObject({ requests: 20, non2xx: 0, errors: 20 });
  });

  it("reports the run's first seconds alone when asked", async () => {
    const result = await openLoop({
      kind: "rate",
      request: spec("/slow-start"),
      rate: 100,
      seconds: 2,
      headSeconds: 1,
      connections: 16,
    });
    expect(result.requests).toBe(200);
    expect(result.head?.seconds).toBe(1);
    expect(result.head?.requests).toBe(100);
    // 60 of the first 100 were late, 60 of all 200: late at the head's median, not the run's.
    expect(result.head!.latencyMs.p50).toBeGreaterThanOrEqual(80);
    expect(result.latencyMs.p50).toBeLessThan(80);
    expect(result.latencyMs.max).toBeGreaterThanOrEqual(80);
    const plain = await openLoop({
      kind: "rate",
      request: spec("/one"),
      rate: 50,
      seconds: 0.2,
      connections: 4,
    });
    expect(plain.head).toBeUndefined();
  });
});
