import type { ConnectError } from "@connectrpc/connect";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { errorInfo } from "../../src/core/errors.js";
import { coreOver } from "../helpers/core.js";
import { tempDir } from "../helpers/process.js";
import { requireBuild, startWorker } from "./child-process.js";
import { expectSoundLedger, type LedgerFixture, ledgerFixture, operatorBillingClient } from "./fixtures.js";

const HOLD = 7000n; // the worst case of the call below, in base units
const TEXT = {
  case: "text" as const,
  value: { model: "model-haiku-4-5", inputTokens: 1000n, maxTokens: 1000n },
};

const cleanups: (() => void)[] = [];
let fixtures: LedgerFixture[] = [];

afterEach(() => {
  for (const f of fixtures) {
    expectSoundLedger(f.db);
    f.db.close();
  }
  fixtures = [];
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function fixture(dataDir?: string): LedgerFixture {
  const f = ledgerFixture(dataDir === undefined ? {} : { dataDir });
  fixtures.push(f);
  return f;
}

describe("64 concurrent workers in one process", () => {
  it("hold exactly as many calls as the balance covers, never overdrawing", async () => {
    const f = fixture();
    const client = operatorBillingClient(f.db, coreOver(f.db));
    const account = f.account();
    const covers = 100n;
    await client.credit({
      accountId: account,
      chain: "base",
      amount: HOLD * covers + HOLD - 1n,
      reason: "load",
    });
    let held = 0;
    let refused = 0;
    await Promise.all(
      Array.from({ length: 64 }, async (_, w) => {
        for (let i = 0; i < 4; i++) {
          try {
            await client.hold({ accountId: account, requestId: `w${w}-${i}`, chain: "base", call: TEXT });
            held++;
          } catch (error) {
            expect(errorInfo(error as ConnectError)?.reason).toBe("INSUFFICIENT_FUNDS");
            refused++;
          }
        }
      }),
    );
    expect(held).toBe(Number(covers));
    expect(refused).toBe(64 * 4 - Number(covers));
    expect(await f.billing.available(account, "base")).toBe(HOLD - 1n);
  });

  it("interleaved holds, settles and releases leave the balance exact", async () => {
    const f = fixture();
    const client = operatorBillingClient(f.db, coreOver(f.db));
    const account = f.account();
    const funds = HOLD * 40n;
    await client.credit({ accountId: account, chain: "base", amount: funds, reason: "load" });
    let charged = 0n;
    await Promise.all(
      Array.from({ length: 64 }, async (_, w) => {
        for (let i = 0; i < 20; i++) {
          let holdId: string;
          try {
            holdId = (
              await client.hold({ accountId: account, requestId: `w${w}-${i}`, chain: "base", call: TEXT })
            ).hold!.id;
          } catch (error) {
            expect(errorInfo(error as ConnectError)?.reason).toBe("INSUFFICIENT_FUNDS");
            continue;
          }
          // Let other workers run between the hold and its resolution.
          await new Promise((r) => setImmediate(r));
          if ((w + i) % 5 === 0) {
            await client.release({ holdId });
          } else {
            const { hold } = await client.settle({
              holdId,
              usage: { outputTokens: BigInt(1 + ((w * 7 + i) % 1000)) },
            });
            charged += hold!.settledAmount;
          }
        }
      }),
    );
    expect(charged > 0n).toBe(true);
    expect(await f.billing.available(account, "base")).toBe(funds - charged);
  });
});

describe("two OS processes sharing one database file", () => {
  beforeAll(requireBuild);

  it("hold exactly as many calls as the balance covers", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const f = fixture(dir.path);
    const account = f.account();
    const covers = 150n;
    await f.billing.credit({
      accountId: account,
      chain: "base",
      amount: HOLD * covers + 1234n,
      reason: "load",
      creditId: "",
    });
    const workers = await Promise.all(
      ["a", "b"].map((prefix) =>
        startWorker({ dataDir: dir.path, accountId: account, prefix, attempts: 120, mode: "hold" }),
      ),
    );
    const results = await Promise.all(workers.map((w) => w.go()));
    await Promise.all(workers.map((w) => w.exited));
    expect(results.reduce((n, r) => n + r.held, 0)).toBe(Number(covers));
    expect(results.reduce((n, r) => n + r.insufficient, 0)).toBe(240 - Number(covers));
    // Both processes got some of the holds: they really did contend.
    expect(results.every((r) => r.held > 0)).toBe(true);
    expect(await f.billing.available(account, "base")).toBe(1234n);
  });

  it("interleaved holds and settles leave the balance exact", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const f = fixture(dir.path);
    const account = f.account();
    const funds = HOLD * 30n;
    await f.billing.credit({
      accountId: account,
      chain: "base",
      amount: funds,
      reason: "load",
      creditId: "",
    });
    const workers = await Promise.all(
      ["a", "b"].map((prefix) =>
        startWorker({ dataDir: dir.path, accountId: account, prefix, attempts: 300, mode: "cycle" }),
      ),
    );
    const results = await Promise.all(workers.map((w) => w.go()));
    await Promise.all(workers.map((w) => w.exited));
    const charged = results.reduce((n, r) => n + BigInt(r.charged), 0n);
    expect(charged).toBe(500n * BigInt(results.reduce((n, r) => n + r.settled, 0)));
    expect(await f.billing.available(account, "base")).toBe(funds - charged);
    expect((await f.billing.available(account, "base")) >= 0n).toBe(true);
  });
});
