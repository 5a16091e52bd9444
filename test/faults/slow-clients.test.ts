/**
 * Slow and broken clients against a gateway running as its own process (`tollgate dev`), in
 * front of a provider stand-in on a real socket that streams without end and honours
 * backpressure itself: slow headers (slowloris), a slow body, clients that never read a stream,
 * a client that vanishes mid-stream. Each is bounded by its documented timeout
 * (TOLLGATE_CLIENT_{HEADERS,REQUEST,STALL}_TIMEOUT_MS, set short here); what the gateway holds
 * for non-reading clients stays bounded (backpressure reaches the provider connection); holds
 * are settled for what was delivered; normal calls are served meanwhile.
 *
 * Figures (printed, not asserted): the gateway's RSS with 1,000 non-reading streams, and a
 * normal call's latency before and during the attack.
 */
import { readFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { cliJson, type GatewayProcess, runCli, startGateway, tempDir, until } from "../helpers/process.js";

const HEADERS_MS = 1_000;
const REQUEST_MS = 2_000;
const STALL_MS = 6_000;
/** Node checks its request timeouts once a second; the slack covers that and a loaded machine. */
const SLACK_MS = 2_500;
const NON_READERS = Number(process.env.NON_READERS ?? 1_000);

/** One streamed text delta of the stand-in: 1 KiB of text. */
const DELTA_TEXT = "lorem ipsum ".repeat(85).slice(0, 1024);

/** A provider stand-in speaking the Anthropic wire format, whose streams never end on their own. */
class EndlessProvider {
  readonly server: Server;
  /** Bytes written to each stream so far, by stream number. */
  readonly written: number[] = [];
  /** Whether each stream's connection was closed by the gateway, by stream number. */
  readonly ended: boolean[] = [];
  url = "";

  constructor() {
    this.server = createServer((req, res) => void this.handle(req, res));
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const address = this.server.address() as { port: number };
    this.url = `http://127.0.0.1:${address.port}`;
  }

  /** Streams from number `from` on still open. */
  open(from = 0): number {
    return this.ended.slice(from).filter((ended) => !ended).length;
  }

  /** Streams closed so far. */
  get closed(): number {
    return this.ended.filter(Boolean).length;
  }

  /** Bytes written to the streams from number `from` on. */
  writtenFrom(from = 0): number {
    return this.written.slice(from).reduce((a, b) => a + b, 0);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
    if (req.url?.startsWith("/v1/messages/count_tokens")) {
      // Four characters a token, as a rough counter would.
      const text = JSON.stringify(body.messages ?? []) + JSON.stringify(body.system ?? "");
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ input_tokens: Math.ceil(text.length / 4) }));
      return;
    }
    const usage = {
      input_tokens: 10,
      output_tokens: 1,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    };
    const message = {
      id: `msg_endless_${this.written.length}`,
      type: "message",
      role: "assistant",
      model: body.model,
      content: [] as unknown[],
      stop_reason: null,
      stop_sequence: null,
      usage,
    };
    if (body.stream !== true) {
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          ...message,
          content: [{ type: "text", text: "short" }],
          stop_reason: "end_turn",
          usage: { ...usage, output_tokens: 2 },
        }),
      );
      return;
    }
    const index = this.written.push(0) - 1;
    this.ended.push(false);
    res.on("close", () => {
      this.ended[index] = true;
    });
    res.writeHead(200, { "content-type": "text/event-stream" });
    const write = (event: string, data: unknown): boolean => {
      const frame = `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
      this.written[index]! += Buffer.byteLength(frame);
      return res.write(frame);
    };
    write("message_start", { type: "message_start", message });
    write("content_block_start", {
      type: "content_block_start",
      index: 0,
      content_block: { type: "text", text: "" },
    });
    const delta = { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: DELTA_TEXT } };
    // "endless": writes while the gateway takes them, and waits for it when it does not (the
    // provider side of backpressure). Otherwise 64 KiB of text, then silence, as a model thinking.
    const endless = JSON.stringify(body.messages).includes("write forever");
    let budget = endless ? Number.POSITIVE_INFINITY : 64;
    while (!res.destroyed && budget-- > 0) {
      if (!write("content_block_delta", delta)) {
        // Each wait takes its listeners off again: an endless stream waits thousands of times.
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off("drain", done);
            res.off("close", done);
            resolve();
          };
          res.once("drain", done);
          res.once("close", done);
        });
      }
    }
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A raw request, as bytes. */
function messageRequest(host: string, secret: string, prompt: "write forever" | "write a little"): string {
  const body = JSON.stringify({
    model: "model-haiku-4-5",
    max_tokens: 64_000,
    stream: true,
    messages: [{ role: "user", content: prompt }],
  });
  return (
    `POST /v1/messages HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nx-api-key: ${secret}\r\n` +
    `anthropic-version: 2023-06-01\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}

/** Opens a socket to `url`. */
function open(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) }, () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Everything the server sends on `socket` until it closes, and how long that took. */
function untilClosed(socket: Socket): Promise<{ text: string; ms: number }> {
  const started = Date.now();
  let text = "";
  socket.on("data", (chunk: Buffer) => {
    text += chunk.toString("latin1");
  });
  return new Promise((resolve) => {
    socket.on("error", () => {});
    socket.on("close", () => resolve({ text, ms: Date.now() - started }));
  });
}

function rssMiB(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith("VmRSS:"));
  return Math.round(Number(line?.replace(/\D+/g, "")) / 1024);
}

function p50(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
}

describe("slow and broken clients", () => {
  const provider = new EndlessProvider();
  const dir = tempDir();
  let gateway: GatewayProcess;
  let env: Record<string, string>;
  let secret = "";
  let accountId = "";

  /** One normal (non-streaming) call's latency in ms; fails unless it is answered 200. */
  async function normalCall(): Promise<number> {
    const started = performance.now();
    const response = await fetch(`${gateway.facadeUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": secret, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({
        model: "model-haiku-4-5",
        max_tokens: 16,
        messages: [{ role: "user", content: "hi" }],
      }),
    });
    expect(response.status).toBe(200);
    await response.arrayBuffer();
    return performance.now() - started;
  }

  async function normalLatency(calls = 30): Promise<number> {
    const times: number[] = [];
    for (let i = 0; i < calls; i++) times.push(await normalCall());
    return p50(times);
  }

  /** The ledger as the gateway left it: audit clean, every hold resolved, none charged above itself. */
  function expectSettledLedger(): void {
    const db = openDatabase(dir.path);
    try {
      expect(auditLedger(db)).toEqual([]);
      expect(db.prepare("SELECT count(*) AS n FROM open_holds").get()).toEqual({ n: 0 });
      const over = db
        .prepare(
          "SELECT count(*) AS n FROM holds JOIN hold_resolutions r ON r.hold_id = holds.id WHERE r.amount > holds.amount",
        )
        .get();
      expect(over).toEqual({ n: 0 });
    } finally {
      db.close();
    }
  }

  beforeAll(async () => {
    await provider.start();
    env = {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_ANTHROPIC_URL: provider.url,
      TOLLGATE_RATE_LIMIT_RPM: "1000000",
      TOLLGATE_CLIENT_HEADERS_TIMEOUT_MS: String(HEADERS_MS),
      TOLLGATE_CLIENT_REQUEST_TIMEOUT_MS: String(REQUEST_MS),
      TOLLGATE_CLIENT_STALL_TIMEOUT_MS: String(STALL_MS),
    };
    const account = await cliJson<{ id: string }>(["account", "create"], env);
    accountId = account.id;
    secret = (await cliJson<{ secret: string }>(["key", "create", "--account", accountId], env)).secret;
    const credit = await runCli(
      ["credit", "--account", accountId, "--chain", "base", "--amount", "100000", "--reason", "test"],
      env,
    );
    expect(credit.code, credit.stderr).toBe(0);
    gateway = await startGateway(env);
  }, 60_000);

  afterAll(async () => {
    await gateway?.stop("SIGKILL");
    await provider.close();
    dir.cleanup();
  });

  it("closes slowloris connections at the headers timeout with a 408 in the envelope, serving normal calls meanwhile", async () => {
    const before = await normalLatency();
    const host = new URL(gateway.facadeUrl).host;
    const sockets = await Promise.all(Array.from({ length: 200 }, () => open(gateway.facadeUrl)));
    const results = sockets.map(untilClosed);
    // One header byte every 100 ms: never a complete request.
    const drip = setInterval(() => {
      for (const socket of sockets) if (!socket.destroyed) socket.write("X");
    }, 100);
    for (const socket of sockets) socket.write(`POST /v1/messages HTTP/1.1\r\nHost: ${host}\r\nx-slow: `);
    const during = await normalLatency(10);
    const closed = await Promise.all(results);
    clearInterval(drip);
    for (const { text, ms } of closed) {
      expect(text).toMatch(/^HTTP\/1\.1 408 /);
      expect(text).toMatch(/x-request-id: req_/);
      expect(text).toContain('"type":"timeout_error"');
      expect(ms).toBeLessThan(HEADERS_MS + SLACK_MS);
    }
    const slowest = Math.max(...closed.map((c) => c.ms));
    console.log(
      `slowloris: 200 connections closed after ≤ ${slowest} ms (headers timeout ${HEADERS_MS} ms); normal call p50 ${before.toFixed(1)} ms before, ${during.toFixed(1)} ms during`,
    );
  }, 60_000);

  it("closes a body that trickles in at the request timeout, with nothing held or forwarded", async () => {
    const streamsBefore = provider.written.length;
    const socket = await open(gateway.facadeUrl);
    const result = untilClosed(socket);
    const host = new URL(gateway.facadeUrl).host;
    socket.write(
      `POST /v1/messages HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nx-api-key: ${secret}\r\nContent-Length: 4096\r\n\r\n{"model":`,
    );
    const drip = setInterval(() => {
      if (!socket.destroyed) socket.write(" ");
    }, 100);
    const { text, ms } = await result;
    clearInterval(drip);
    expect(text).toMatch(/^HTTP\/1\.1 408 /);
    expect(ms).toBeLessThan(REQUEST_MS + SLACK_MS);
    expect(provider.written.length).toBe(streamsBefore);
    console.log(`slow body: closed after ${ms} ms (request timeout ${REQUEST_MS} ms)`);
    expectSettledLedger();
  }, 30_000);

  it("settles a stream the client vanished from, and closes the provider connection", async () => {
    const closedBefore = provider.closed;
    const socket = await open(gateway.facadeUrl);
    let received = 0;
    socket.on("data", (chunk: Buffer) => {
      received += chunk.byteLength;
    });
    socket.write(messageRequest(new URL(gateway.facadeUrl).host, secret, "write forever"));
    await until("some of the stream", async () => (received > 64 * 1024 ? true : undefined));
    socket.destroy();
    await until(
      "the provider connection to close",
      async () => (provider.closed > closedBefore ? true : undefined),
      10_000,
    );
    await until("the hold to be settled", async () => {
      const db = openDatabase(dir.path);
      try {
        const open = db.prepare("SELECT count(*) AS n FROM open_holds").get() as { n: number };
        return open.n === 0 ? true : undefined;
      } finally {
        db.close();
      }
    });
    const db = openDatabase(dir.path);
    try {
      const row = db
        .prepare(
          "SELECT r.status, r.amount, r.input_tokens, r.output_tokens, holds.amount AS hold FROM holds JOIN hold_resolutions r ON r.hold_id = holds.id ORDER BY holds.seq DESC LIMIT 1",
        )
        .get() as {
        status: string;
        amount: number;
        input_tokens: number;
        output_tokens: number;
        hold: number;
      };
      // Input in full and the delivered output: more than nothing, never above the hold.
      expect(row.status).toBe("settled");
      expect(row.input_tokens).toBe(10);
      expect(row.output_tokens).toBeGreaterThan(0);
      expect(row.amount).toBeGreaterThan(0);
      expect(row.amount).toBeLessThanOrEqual(row.hold);
    } finally {
      db.close();
    }
    expectSettledLedger();
  }, 30_000);

  /** Opens `count` streams whose clients send the request and never read. */
  async function nonReaders(count: number, prompt: "write forever" | "write a little"): Promise<Socket[]> {
    const host = new URL(gateway.facadeUrl).host;
    const first = provider.written.length;
    const sockets: Socket[] = [];
    for (let i = 0; i < count; i++) {
      const socket = await open(gateway.facadeUrl);
      socket.on("error", () => {});
      // The socket is paused from the start: nothing the gateway sends is read.
      socket.pause();
      socket.write(messageRequest(host, secret, prompt));
      sockets.push(socket);
    }
    await until(
      `${count} streams to reach the provider`,
      async () => (provider.written.length - first >= count ? true : undefined),
      60_000,
      () => `${provider.written.length - first} reached; gateway: ${gateway.stderr().slice(-2000)}`,
    );
    return sockets;
  }

  async function untilNoOpenHold(): Promise<void> {
    await until("every hold to be settled", async () => {
      const db = openDatabase(dir.path);
      try {
        return (db.prepare("SELECT count(*) AS n FROM open_holds").get() as { n: number }).n === 0
          ? true
          : undefined;
      } finally {
        db.close();
      }
    });
  }

  it(`holds ${NON_READERS} streams nobody reads in bounded memory, and settles each when its client goes`, async () => {
    const rssBefore = rssMiB(gateway.child.pid!);
    const first = provider.written.length;
    const sockets = await nonReaders(NON_READERS, "write a little");
    await sleep(1_000);
    const rss = rssMiB(gateway.child.pid!);
    const during = await normalLatency(10);
    console.log(
      `non-reading clients: ${NON_READERS} streams open (64 KiB each, unread), gateway RSS ${rssBefore} → ${rss} MiB ` +
        `(${(((rss - rssBefore) * 1024) / NON_READERS).toFixed(0)} KiB a stream); normal call p50 ${during.toFixed(1)} ms meanwhile`,
    );
    expect(provider.open(first)).toBe(NON_READERS);
    for (const socket of sockets) socket.destroy();
    await until(
      "every provider connection to close",
      async () => (provider.open(first) === 0 ? true : undefined),
      30_000,
    );
    await untilNoOpenHold();
    expectSettledLedger();
    expect(await normalCall()).toBeGreaterThan(0);
  }, 180_000);

  it("holds back an endless stream nobody reads (backpressure reaches the provider), ends it at the stall timeout and settles it", async () => {
    const first = provider.written.length;
    const opened = Date.now();
    const sockets = await nonReaders(20, "write forever");
    // Once the buffers between client and provider are full, the provider can write no more:
    // wait until its writes stop growing.
    let last = -1;
    await until("the provider's writes to stop growing", async () => {
      const now = provider.writtenFrom(first);
      const still = now === last;
      last = now;
      await sleep(500);
      return still ? true : undefined;
    });
    const held = Date.now() - opened;
    const perStream = provider.writtenFrom(first) / 20;
    console.log(
      `endless non-reading streams: the provider could write ${(perStream / 1024 / 1024).toFixed(1)} MiB per stream before it was held back (socket buffers); held after ${held} ms`,
    );
    // Bounded by the socket buffers on the way; an unread endless stream would otherwise grow
    // without end. Nothing was ended before the stall timeout.
    expect(perStream).toBeLessThan(32 * 1024 * 1024);
    if (held < STALL_MS) expect(provider.open(first)).toBe(20);
    await until(
      "the stalled streams to be ended",
      async () => (provider.open(first) === 0 ? true : undefined),
      STALL_MS + 20_000,
    );
    const ended = Date.now() - opened;
    expect(ended).toBeGreaterThanOrEqual(STALL_MS);
    console.log(
      `endless non-reading streams: ended ${ended} ms after they opened (stall timeout ${STALL_MS} ms)`,
    );
    for (const socket of sockets) socket.destroy();
    await untilNoOpenHold();
    expectSettledLedger();
  }, 120_000);
});
