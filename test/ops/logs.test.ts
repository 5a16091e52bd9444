import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import {
  type DevUpstream,
  type ScriptedReply,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { cliJson, runCli, startGateway, tempDir } from "../helpers/process.js";

// The gateway's log as an operator's pipeline reads it (docs/operations.md, "Logs"): a real
// `tollgate dev` process at TOLLGATE_LOG_LEVEL=info, its text provider the dev upstream in this
// process, scripted to refuse the gateway's provider key for one call.

/** The prompt the scripted provider answers with a 401 (the gateway's own key refused). */
const REFUSED_PROMPT = "the provider refuses this one";
/** The prompt the scripted provider answers with a slow stream, which the test walks away from. */
const LEFT_PROMPT = "a stream its caller leaves";

/** A slow stream: its start, then a word every 50 ms, 40 of them (the caller leaves early). */
const SLOW_STREAM: ScriptedReply = {
  kind: "stream",
  events: [
    {
      event: "message_start",
      data: {
        type: "message_start",
        message: {
          id: "msg_left",
          type: "message",
          role: "assistant",
          model: "claude-sonnet-4-6",
          content: [],
          usage: { input_tokens: 12, output_tokens: 1 },
        },
      },
    },
    {
      event: "content_block_start",
      data: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
    },
    ...Array.from({ length: 40 }, (_, i) => ({
      event: "content_block_delta",
      data: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: ` word${i}` } },
      delayMs: 50,
    })),
  ],
};

interface LogLine {
  readonly level: string;
  readonly msg: string;
  readonly requestId?: string;
  readonly route?: string | null;
  readonly status?: number;
  readonly latencyMs?: number;
  readonly chain?: string;
  readonly charge?: string;
  readonly [field: string]: unknown;
}

/** The ready line: the one line on stdout that is not JSON, by design (tests and people read it). */
const READY_LINE = /^tollgate ready: facade \S+ core \S+/;

/** Every line of `text`, parsed: throws on the first that is not one JSON object. */
function parseLines(text: string): LogLine[] {
  return text
    .split("\n")
    .filter((line) => line !== "" && !READY_LINE.test(line))
    .map((line) => {
      const parsed: unknown = JSON.parse(line);
      if (typeof parsed !== "object" || parsed === null) throw new Error(`not a JSON object: ${line}`);
      return parsed as LogLine;
    });
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("the gateway's log", () => {
  it("is JSON throughout: one info line per request with its charge, and the core's error line names the same request", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const upstream: DevUpstream = await startDevUpstream({
      script: (request) => {
        if (request.rawBody.includes(LEFT_PROMPT)) return SLOW_STREAM;
        if (!request.rawBody.includes(REFUSED_PROMPT)) return undefined;
        return {
          kind: "json",
          status: 401,
          body: { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" } },
        };
      },
    });
    cleanups.push(() => upstream.close());
    const env = { TOLLGATE_DATA_DIR: dir.path };
    const gateway = await startGateway({
      ...env,
      TOLLGATE_LOG_LEVEL: "info",
      TOLLGATE_ANTHROPIC_URL: upstream.url,
    });
    cleanups.push(() => gateway.stop("SIGKILL"));

    const account = await cliJson<{ id: string }>(["account", "create", "--name", "logs"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    const credit = await runCli(
      ["credit", "--account", account.id, "--chain", "base", "--amount", "5", "--reason", "logs"],
      env,
    );
    expect(credit.code).toBe(0);

    const call = async (body: unknown, headers: Record<string, string> = {}) => {
      const response = await fetch(`${gateway.facadeUrl}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key.secret}`, ...headers },
        body: JSON.stringify(body),
      });
      await response.arrayBuffer();
      return { status: response.status, requestId: response.headers.get("x-request-id")! };
    };
    const message = (content: string, stream = false) => ({
      model: "claude-sonnet-4-6",
      max_tokens: 64,
      messages: [{ role: "user", content }],
      ...(stream ? { stream } : {}),
    });
    const billed = await call(message("hi"));
    expect(billed.status).toBe(200);
    const streamed = await call(message("hi, streamed", true));
    expect(streamed.status).toBe(200);
    const once = { "idempotency-key": "logs-once" };
    const first = await call(message("once"), once);
    const replayed = await call(message("once"), once);
    expect([first.status, replayed.status]).toEqual([200, 200]);
    const refused = await call({ model: "claude-sonnet-4-6", messages: [] });
    expect(refused.status).toBe(400);
    const failed = await call(message(REFUSED_PROMPT));
    expect(failed.status).toBeGreaterThanOrEqual(500);
    // A caller that leaves a stream after its first bytes.
    const leaving = new AbortController();
    const left = await fetch(`${gateway.facadeUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key.secret}` },
      body: JSON.stringify(message(LEFT_PROMPT, true)),
      signal: leaving.signal,
    });
    const reader = left.body!.getReader();
    let read = "";
    while (!read.includes("word2")) read += Buffer.from((await reader.read()).value!).toString();
    leaving.abort();
    const leftCall = { status: left.status, requestId: left.headers.get("x-request-id")! };
    const calls = [billed, streamed, first, replayed, refused, failed, leftCall];
    for (const c of calls) expect(c.requestId).toMatch(/\S/);

    // Each request's line is written once its response has ended: wait for all of them (bounded).
    const requestLines = () => parseLines(gateway.stdout()).filter((line) => line.msg === "request");
    // The core's line for the stream its caller left is written once that call settled.
    const settledLine = () =>
      parseLines(gateway.stdout()).find((line) => line.msg === "settled after its caller stopped reading");
    for (let i = 0; i < 100 && (requestLines().length < calls.length || !settledLine()); i++) await sleep(50);
    expect(await gateway.stop("SIGTERM")).toBe(0);

    const lines = [...parseLines(gateway.stdout()), ...parseLines(gateway.stderr())];
    for (const c of calls) {
      const own = lines.filter((line) => line.requestId === c.requestId && line.msg === "request");
      expect(own).toHaveLength(1);
      expect(own[0]).toMatchObject({
        level: "info",
        method: "POST",
        route: "/v1/messages",
        status: c.status,
      });
      expect(own[0]!.latencyMs).toBeGreaterThan(0);
    }
    // Fastify's own per-request lines are off: every other info line about a request is the
    // core's, for the stream its caller left.
    const infoWithId = lines.filter(
      (line) => line.level === "info" && line.requestId !== undefined && line.msg !== "request",
    );
    expect(infoWithId.map((line) => [line.msg, line.requestId])).toEqual([
      ["settled after its caller stopped reading", leftCall.requestId],
    ]);
    expect(lines.find((line) => line.requestId === billed.requestId && line.msg === "request")?.chain).toBe(
      "base",
    );
    expect(
      lines.find((line) => line.requestId === refused.requestId && line.msg === "request"),
    ).not.toHaveProperty("chain");

    // The provider refused the gateway's key: the caller sees a plain provider error, the operator
    // sees why, on a line carrying the same request id.
    const coreError = lines.find((line) => line.level === "error" && line.requestId === failed.requestId);
    expect(coreError).toMatchObject({ component: "core", msg: "provider credentials" });
    expect(JSON.stringify(coreError)).toContain("provider answered 401");
    // The facade's own error line for the 5xx names the core's reason, not the detail's schema.
    const facadeError = lines.find(
      (line) => line.requestId === failed.requestId && line.msg === "request failed",
    );
    expect(facadeError?.err).toMatchObject({
      details: [{ type: "google.rpc.ErrorInfo", value: { reason: "UPSTREAM_ERROR" } }],
    });
    expect(JSON.stringify(facadeError)).not.toContain("nestedMessages");
    // The other calls logged no error.
    expect(lines.filter((line) => line.level === "error" && line.requestId !== failed.requestId)).toEqual([]);

    const db = openDatabase(dir.path);
    try {
      // Each billed call's line says what the ledger charged it, as integer text (ledger units);
      // the replay says 0 (billed once); a refused or failed call has no charge.
      const charged = (requestId: string) =>
        (
          db
            .prepare(
              "SELECT r.amount FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.request_id = ?",
            )
            .get(requestId) as { amount: number }
        ).amount;
      const line = (requestId: string, msg = "request") =>
        lines.find((l) => l.requestId === requestId && l.msg === msg);
      for (const c of [billed, streamed, first]) {
        expect(charged(c.requestId)).toBeGreaterThan(0);
        expect(line(c.requestId)?.charge).toBe(`${charged(c.requestId)}`);
      }
      // The replay, a request of its own, placed no hold and says 0.
      expect(line(replayed.requestId)?.charge).toBe("0");
      expect(
        db.prepare("SELECT count(*) AS n FROM holds WHERE request_id = ?").get(replayed.requestId),
      ).toEqual({
        n: 0,
      });
      expect(line(refused.requestId)).not.toHaveProperty("charge");
      expect(line(failed.requestId)).not.toHaveProperty("charge");
      // The stream its caller left: no charge on the request line (it ended first); the core's
      // own line says what it was charged for what had been delivered.
      expect(line(leftCall.requestId)).not.toHaveProperty("charge");
      expect(line(leftCall.requestId)).toMatchObject({
        chain: "base",
        err: { message: "the client went away before the response ended" },
      });
      expect(line(leftCall.requestId, "settled after its caller stopped reading")).toMatchObject({
        component: "core",
        chain: "base",
        charge: `${charged(leftCall.requestId)}`,
      });
      expect(charged(leftCall.requestId)).toBeGreaterThan(0);
      expect(auditLedger(db)).toEqual([]);
      expect(db.prepare("SELECT count(*) AS n FROM open_holds").get()).toEqual({ n: 0 });
    } finally {
      db.close();
    }
  });
});
