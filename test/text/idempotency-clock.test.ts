import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { errorInfo } from "../../src/core/errors.js";
import {
  IDEMPOTENCY_ANSWER_LIMIT,
  IDEMPOTENCY_TTL_MS,
  IdempotentCalls,
  type IdempotentStart,
} from "../../src/core/inference/idempotency.js";
import { errorHeaders, toFacadeError } from "../../src/facade/http-status.js";
import { type Db, openDatabase } from "../../src/store/sqlite/database.js";
import { SqliteIdempotency } from "../../src/store/sqlite/idempotency.js";
import { tempDir } from "../helpers/process.js";

// Idempotent calls over the SQLite store with an injected clock: the 24-hour expiry, the sweep,
// an abandoned call's key, an answer too large to keep, and how each refusal reaches HTTP.

const MAX_CALL_MS = 15 * 60_000;
const BODY = new TextEncoder().encode('{"model":"m"}');
const OTHER = new TextEncoder().encode('{"model":"n"}');

let dir: ReturnType<typeof tempDir>;
let db: Db;
let clock: number;
let calls: IdempotentCalls;
const errors: unknown[] = [];

beforeEach(() => {
  dir = tempDir();
  db = openDatabase(dir.path);
  clock = Date.UTC(2026, 0, 1);
  errors.length = 0;
  calls = new IdempotentCalls({
    store: new SqliteIdempotency(db),
    now: () => clock,
    maxCallMs: MAX_CALL_MS,
    onError: (error) => errors.push(error),
  });
});
afterEach(() => {
  db.close();
  dir.cleanup();
  expect(errors).toEqual([]);
});

async function refusal(start: Promise<unknown>) {
  const error = await start.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectError);
  return error as ConnectError;
}

function claimed(start: IdempotentStart | undefined) {
  if (start?.kind !== "run") throw new Error(`expected to run, got ${start?.kind}`);
  return start.claim;
}

const rows = () => (db.prepare("SELECT count(*) AS n FROM idempotency_keys").get() as { n: number }).n;

describe("idempotent calls over time", () => {
  it("keeps an answer 24 hours, then runs the key afresh, with any body", async () => {
    await claimed(await calls.start("acct", "k", "/v1/messages", BODY)).complete(new Uint8Array([7]));
    clock += IDEMPOTENCY_TTL_MS - 1;
    expect(await calls.start("acct", "k", "/v1/messages", BODY)).toEqual({
      kind: "replay",
      answer: new Uint8Array([7]),
    });
    const reused = await refusal(calls.start("acct", "k", "/v1/messages", OTHER));
    expect(errorInfo(reused)?.reason).toBe("IDEMPOTENCY_KEY_REUSED");
    expect(toFacadeError(reused).status).toBe(422);
    clock += 1;
    expect((await calls.start("acct", "k", "/v1/messages", OTHER))?.kind).toBe("run");
  });

  it("treats the route as part of the request", async () => {
    await claimed(await calls.start("acct", "k", "/v1/messages", BODY)).complete(new Uint8Array([1]));
    const reused = await refusal(calls.start("acct", "k", "/v1/images/generations", BODY));
    expect(errorInfo(reused)?.reason).toBe("IDEMPOTENCY_KEY_REUSED");
  });

  it("answers 409 while a call runs, and takes over one abandoned past the longest call", async () => {
    claimed(await calls.start("acct", "k", "/v1/messages", BODY));
    clock += MAX_CALL_MS;
    const running = await refusal(calls.start("acct", "k", "/v1/messages", BODY));
    expect(running.code).toBe(Code.Aborted);
    expect(toFacadeError(running).status).toBe(409);
    clock += 1;
    expect((await calls.start("acct", "k", "/v1/messages", BODY))?.kind).toBe("run");
  });

  it("refuses the retry of an answer too large to keep: 409 with x-should-retry false", async () => {
    const claim = claimed(await calls.start("acct", "k", "/v1/messages", BODY));
    await claim.complete(new Uint8Array(IDEMPOTENCY_ANSWER_LIMIT + 1));
    const dropped = await refusal(calls.start("acct", "k", "/v1/messages", BODY));
    expect(errorInfo(dropped)?.reason).toBe("IDEMPOTENCY_ANSWER_NOT_KEPT");
    const mapped = toFacadeError(dropped);
    expect(mapped.status).toBe(409);
    expect(errorHeaders(mapped)["x-should-retry"]).toBe("false");
    const stored = db.prepare("SELECT state, answer FROM idempotency_keys").get();
    expect(stored).toEqual({ state: "dropped", answer: null });
  });

  it("sweeps expired keys at most once a minute, on a call with a key", async () => {
    const keep = async (key: string) =>
      claimed(await calls.start("acct", key, "/v1/messages", BODY)).complete(new Uint8Array([1]));
    /** Lets the sweep a claim started in its background finish. */
    const settled = () => new Promise((resolve) => setTimeout(resolve, 50));
    const t0 = clock;
    for (const key of ["a", "b", "c"]) await keep(key);
    clock = t0 + 10_000;
    await keep("f");
    clock = t0 + IDEMPOTENCY_TTL_MS;
    await keep("d");
    await settled();
    // a, b and c expired and were swept; f (10 s younger) was not due.
    expect(rows()).toBe(2);
    clock = t0 + IDEMPOTENCY_TTL_MS + 30_000;
    await keep("e");
    await settled();
    // f has expired, but the last sweep was 30 s ago: it waits for the next.
    expect(rows()).toBe(3);
    clock = t0 + IDEMPOTENCY_TTL_MS + 61_000;
    await keep("g");
    await settled();
    expect(rows()).toBe(3);
    expect(db.prepare("SELECT key FROM idempotency_keys ORDER BY key").pluck().all()).toEqual([
      "d",
      "e",
      "g",
    ]);
  });

  it("refuses a malformed key with a 400 naming idempotency_key", async () => {
    for (const key of ["x".repeat(256), " lead", "tab\t", "é"]) {
      const malformed = await refusal(calls.start("acct", key, "/v1/messages", BODY));
      expect(errorInfo(malformed)?.metadata.field).toBe("idempotency_key");
      expect(toFacadeError(malformed).status).toBe(400);
    }
    expect(await calls.start("acct", "", "/v1/messages", BODY)).toBeUndefined();
    expect(rows()).toBe(0);
  });
});
