import { execFileSync } from "node:child_process";
import {
  closeSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { type Client, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import Database from "better-sqlite3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService, HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { SPOOL_DIR } from "../../src/store/shared/resolution-spool.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { DATABASE_FILE } from "../../src/store/sqlite/database.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";
import { expectedCharge } from "../helpers/text-gateway.js";

// Nothing kept only in memory (docs/store.md, "When the store refuses a settlement"): the store
// refuses the settlement of a stream already delivered (SQLite: its disk is full; PostgreSQL:
// the server is down), the gateway is SIGKILLed, and the one started after it — on the same data
// dir — finds the settlement in its spool and writes it. The call is charged exactly once, for
// its price, and the ledger audit (conservation) is clean. Without the spool the sweeper would
// void the hold after the restart and the delivered call would be free.

const ADMIN_TOKEN = "spool-crash-operator-token-0123456789abcdef";
/** Short: sweeps after the restart are due for the hold long before the test ends. */
const MAX_CALL_MS = 2_500;
const SWEEP_INTERVAL_MS = 200;
const CREDITED = 10_000_000n;
const MODEL = "model-haiku-4-5";

let upstream: DevUpstream;
/**
 * Runs when the stand-in provider receives a message request (the hold is durable by then); the
 * provider answers once it is done, its event loop free meanwhile.
 */
let onProviderRequest: (() => void | Promise<void>) | undefined;
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  upstream = await startDevUpstream({
    script: async (request) => {
      if (request.path.startsWith("/v1/messages") && !request.path.includes("count_tokens")) {
        const run = onProviderRequest;
        onProviderRequest = undefined;
        await run?.();
      }
      return undefined;
    },
  });
});
afterAll(async () => {
  await upstream?.close();
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) {
    try {
      await cleanup();
    } catch (error) {
      console.error("spool-crash cleanup:", error);
    }
  }
});

/** A gateway (`tollgate dev`) on `dataDir` and the operator's clients on it. */
async function gatewayOn(dataDir: string, extra: Record<string, string> = {}) {
  const gateway = await startGateway(
    {
      TOLLGATE_DATA_DIR: dataDir,
      TOLLGATE_ANTHROPIC_URL: upstream.url,
      TOLLGATE_GEMINI_URL: upstream.url,
      TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
      TOLLGATE_MAX_CALL_MS: String(MAX_CALL_MS),
      TOLLGATE_HOLD_SWEEP_INTERVAL_MS: String(SWEEP_INTERVAL_MS),
      ...extra,
    },
    30_000,
  );
  cleanups.push(() => gateway.stop("SIGKILL"));
  const transport = createConnectTransport({
    baseUrl: gateway.coreUrl,
    httpVersion: "2",
    interceptors: [
      (next) => (request) => {
        request.header.set("authorization", `Bearer ${ADMIN_TOKEN}`);
        return next(request);
      },
    ],
  });
  return {
    gateway,
    billing: createClient(BillingService, transport),
    auth: createClient(AuthService, transport),
  };
}

type Clients = Awaited<ReturnType<typeof gatewayOn>>;

/** A funded account with a key. */
async function fundedAccount({ auth, billing }: Clients): Promise<{ accountId: string; secret: string }> {
  const { account } = await auth.createAccount({ name: "spool-crash" });
  const accountId = account!.id;
  const { secret } = await auth.createKey({ accountId, name: "spool-crash-key" });
  await billing.credit({ accountId, chain: "base", amount: CREDITED, reason: "test funds" });
  return { accountId, secret };
}

/** Streams one call to its end with the official SDK, `refuse` running once its hold is durable. */
async function deliveredStream(gateway: GatewayProcess, secret: string, refuse: () => void | Promise<void>) {
  const anthropic = new Anthropic({ baseURL: gateway.facadeUrl, apiKey: secret, maxRetries: 0 });
  onProviderRequest = refuse;
  const message = await anthropic.messages
    .stream({ model: MODEL, max_tokens: 32, messages: [{ role: "user", content: "hello" }] })
    .finalMessage();
  expect(message.stop_reason).toBe("end_turn");
  expect(onProviderRequest).toBeUndefined();
  return expectedCharge(MODEL, { input: message.usage.input_tokens, output: message.usage.output_tokens });
}

/** Whether the spool in `dataDir` holds a record (anything but zeros). */
function spooled(dataDir: string): boolean {
  const dir = join(dataDir, SPOOL_DIR);
  const file = readdirSync(dir).find((name) => name.endsWith(".spool"));
  return file !== undefined && readFileSync(join(dir, file)).some((b) => b !== 0);
}

/** The account's calls, and its balance available on `base`. */
async function ledgerOf(billing: Client<typeof BillingService>, accountId: string) {
  const { rows } = await billing.listUsage({ accountId, pageSize: 100 });
  const { balances } = await billing.getBalances({ accountId });
  return { rows, available: balances.find((b) => b.chain?.id === "base")?.available ?? 0n };
}

/** The call settled once for `charge`: one row, settled, and the balance down by exactly it. */
async function expectChargedOnce(clients: Clients, accountId: string, charge: bigint): Promise<void> {
  const settled = await until("the spooled settlement to be written", async () => {
    const { rows } = await ledgerOf(clients.billing, accountId);
    return rows[0]?.status === HoldStatus.PENDING ? undefined : rows;
  });
  expect(settled).toHaveLength(1);
  expect(settled[0]!.status).toBe(HoldStatus.SETTLED);
  expect(settled[0]!.amount).toBe(charge);
  expect((await ledgerOf(clients.billing, accountId)).available).toBe(CREDITED - charge);
}

describe("SQLite: the disk is full when the stream's settlement is written", () => {
  // A tmpfs this test mounts (we run as root, as CI does) and fills, as test/faults/disk-full.test.ts.
  let mount: string;
  beforeAll(() => {
    mount = mkdtempSync(join(tmpdir(), "tollgate-spool-crash-"));
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=24m", "tmpfs", mount]);
  });
  afterAll(() => {
    if (mount === undefined) return;
    execFileSync("umount", [mount]);
    rmdirSync(mount);
  });

  it("spools it in the preallocated file, survives SIGKILL, and the next process charges it once", async () => {
    const first = await gatewayOn(mount);
    const { accountId, secret } = await fundedAccount(first);
    const db = new Database(join(mount, DATABASE_FILE), { fileMustExist: true });
    cleanups.push(() => db.close());
    const filler = join(mount, "filler");
    const fill = () => {
      db.pragma("wal_checkpoint(TRUNCATE)");
      const fd = openSync(filler, "a");
      try {
        for (const size of [1 << 20, 4096, 1]) {
          try {
            for (;;) writeSync(fd, Buffer.alloc(size));
          } catch (error) {
            if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
          }
        }
      } finally {
        closeSync(fd);
      }
    };
    const charge = await deliveredStream(first.gateway, secret, fill);
    expect(charge).toBeGreaterThan(0n);
    // The settle was refused (the hold is open) and is on disk in the spool, on the full disk.
    await until("the refused settle to be spooled", async () => (spooled(mount) ? true : undefined));
    expect((await ledgerOf(first.billing, accountId)).rows[0]!.status).toBe(HoldStatus.PENDING);
    await first.gateway.stop("SIGKILL");

    // Started again on the still full disk: the settle is taken over, and sweeps due for the hold
    // (past the longest call) do not void it while it waits.
    const second = await gatewayOn(mount);
    await sleep(MAX_CALL_MS + 3 * SWEEP_INTERVAL_MS);
    expect((await ledgerOf(second.billing, accountId)).rows[0]!.status).toBe(HoldStatus.PENDING);
    unlinkSync(filler);
    await expectChargedOnce(second, accountId, charge);
    expect(auditLedger(db)).toEqual([]);
    await until("the spool to be emptied", async () => (spooled(mount) ? undefined : true));
    expect(second.gateway.stderr()).not.toMatch(/kept in memory only/);
  }, 90_000);
});

describe("PostgreSQL: the server is down when the stream's settlement is written", () => {
  let postgres: PostgresServer;
  beforeAll(async () => {
    postgres = await startPostgres();
  }, 60_000);
  afterAll(async () => {
    await postgres?.stop();
  });

  it("spools it, survives SIGKILL, and the next process charges it once when the server is back", async () => {
    const url = await postgres.freshDatabase();
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const env = { TOLLGATE_DATABASE_URL: url };
    const first = await gatewayOn(dir.path, env);
    const { accountId, secret } = await fundedAccount(first);
    // The server crashes while the provider answers: the hold is durable, the settle is refused.
    // pg_ctl runs off the provider's event loop: a slow stop under load must not stall its stream.
    const charge = await deliveredStream(first.gateway, secret, () => postgres.haltAsync("immediate")).catch(
      (error: unknown) => {
        // A gateway that died says why on its stderr: shown beside the client's error.
        throw new Error(
          `the stream failed (${String(error)}); the gateway's stderr:\n${first.gateway.stderr()}`,
          {
            cause: error,
          },
        );
      },
    );
    await until("the refused settle to be spooled", async () => (spooled(dir.path) ? true : undefined));
    await first.gateway.stop("SIGKILL");

    postgres.start();
    const pool = await openPostgres(url, 1);
    cleanups.push(() => pool.end());
    const open = await pool.query(
      "SELECT count(*)::int AS n FROM holds h WHERE NOT EXISTS (SELECT 1 FROM hold_resolutions r WHERE r.hold_id = h.id)",
    );
    expect(open.rows[0]).toEqual({ n: 1 });

    const second = await gatewayOn(dir.path, env);
    await expectChargedOnce(second, accountId, charge);
    // Sweeps past the longest call change nothing more.
    await sleep(MAX_CALL_MS + 3 * SWEEP_INTERVAL_MS);
    await expectChargedOnce(second, accountId, charge);
    expect(await auditPostgres(pool)).toEqual([]);
    expect(spooled(dir.path)).toBe(false);
  }, 90_000);
});
