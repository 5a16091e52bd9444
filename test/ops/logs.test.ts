import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { openDatabase } from "../../src/store/database.js";
import { auditLedger } from "../../src/store/ledger-audit.js";
import { cliJson, runCli, startGateway, tempDir } from "../helpers/process.js";

// The gateway's log as an operator's pipeline reads it (docs/deployment.md, "Logs"): a real
// `tollgate dev` process at TOLLGATE_LOG_LEVEL=info, its text provider the dev upstream in this
// process, scripted to refuse the gateway's provider key for one call.

/** The prompt the scripted provider answers with a 401 (the gateway's own key refused). */
const REFUSED_PROMPT = "the provider refuses this one";

interface LogLine {
  readonly level: string;
  readonly msg: string;
  readonly requestId?: string;
  readonly route?: string | null;
  readonly status?: number;
  readonly latencyMs?: number;
  readonly chain?: string;
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
  it("is JSON throughout: one info line per request, and the core's error line names the same request", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const upstream: DevUpstream = await startDevUpstream({
      script: (request) =>
        request.rawBody.includes(REFUSED_PROMPT)
          ? {
              kind: "json",
              status: 401,
              body: { type: "error", error: { type: "authentication_error", message: "invalid x-api-key" } },
            }
          : undefined,
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

    const call = async (body: unknown) => {
      const response = await fetch(`${gateway.facadeUrl}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key.secret}` },
        body: JSON.stringify(body),
      });
      await response.arrayBuffer();
      return { status: response.status, requestId: response.headers.get("x-request-id")! };
    };
    const message = (content: string) => ({
      model: "claude-sonnet-4-6",
      max_tokens: 64,
      messages: [{ role: "user", content }],
    });
    const billed = await call(message("hi"));
    expect(billed.status).toBe(200);
    const refused = await call({ model: "claude-sonnet-4-6", messages: [] });
    expect(refused.status).toBe(400);
    const failed = await call(message(REFUSED_PROMPT));
    expect(failed.status).toBeGreaterThanOrEqual(500);
    const calls = [billed, refused, failed];
    for (const c of calls) expect(c.requestId).toMatch(/\S/);

    // Each request's line is written once its response has ended: wait for the three (bounded).
    const requestLines = () => parseLines(gateway.stdout()).filter((line) => line.msg === "request");
    for (let i = 0; i < 100 && requestLines().length < calls.length; i++) await sleep(50);
    expect(await gateway.stop("SIGTERM")).toBe(0);

    const lines = [...parseLines(gateway.stdout()), ...parseLines(gateway.stderr())];
    for (const c of calls) {
      const own = lines.filter((line) => line.requestId === c.requestId && line.level === "info");
      expect(own).toHaveLength(1);
      expect(own[0]).toMatchObject({
        msg: "request",
        method: "POST",
        route: "/v1/messages",
        status: c.status,
      });
      expect(own[0]!.latencyMs).toBeGreaterThan(0);
    }
    // Fastify's own per-request lines are off: every info line about a request is the facade's.
    const infoWithId = lines.filter((line) => line.level === "info" && line.requestId !== undefined);
    expect(infoWithId.every((line) => line.msg === "request")).toBe(true);
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
    // The two other calls logged no error.
    expect(lines.filter((line) => line.level === "error" && line.requestId !== failed.requestId)).toEqual([]);

    const db = openDatabase(dir.path);
    try {
      expect(auditLedger(db)).toEqual([]);
      expect(db.prepare("SELECT count(*) AS n FROM open_holds").get()).toEqual({ n: 0 });
    } finally {
      db.close();
    }
  });
});
