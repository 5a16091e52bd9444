import { describe, expect, it } from "vitest";
import { NO_USAGE } from "../../src/core/billing/pricing.js";
import { PrometheusMetrics } from "../../src/metrics/prometheus.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { expectSoundLedger, SMALL_TEXT_CALL } from "../billing/fixtures.js";
import { coreOver } from "../helpers/core.js";

// Every way a hold ends, counted by the core through its metrics port: a real core over a real
// SQLite ledger, the sweeper's clock moved past the longest call.

/** The value of `name{labels}` in the exposition text, 0 when absent. */
function value(text: string, sample: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${sample} `));
  return line === undefined ? 0 : Number(line.slice(sample.length + 1));
}

describe("hold metrics", () => {
  it("count holds placed, settled, released and swept, and the exact amount charged", async () => {
    let clock = 1_700_000_000_000;
    const db = openDatabase(":memory:");
    const metrics = new PrometheusMetrics();
    const core = coreOver(db, { metrics, now: () => clock, maxCallMs: 15 * 60_000 });
    new AuthRepository(db).createAccount("acct_metrics", "metrics", clock);
    const accountId = "acct_metrics";
    await core.billing.credit({ accountId, chain: "base", amount: 1_000_000n, reason: "test", creditId: "" });
    const hold = (requestId: string) =>
      core.billing.holdNewCall({ accountId, requestId, keyId: "", chain: "base", call: SMALL_TEXT_CALL });
    const settled = await hold("settled");
    const released = await hold("released");
    await hold("orphaned");
    // The same request id again is refused: no second hold is counted.
    await expect(hold("settled")).rejects.toThrow();
    const { state } = await core.billing.settleDelivered(settled.hold, {
      ...NO_USAGE,
      inputTokens: 700n,
      outputTokens: 300n,
    });
    await core.billing.release(released.hold.id);
    clock += 15 * 60_000 + 1;
    expect(await core.sweeper.sweep()).toBe(1);

    const text = (await metrics.scrape()).text;
    expect(value(text, 'tollgate_holds_placed_total{kind="text"}')).toBe(3);
    expect(value(text, 'tollgate_holds_resolved_total{outcome="settled"}')).toBe(1);
    expect(value(text, 'tollgate_holds_resolved_total{outcome="released"}')).toBe(1);
    expect(value(text, 'tollgate_holds_resolved_total{outcome="swept"}')).toBe(1);
    const charged = state.resolution!.amount;
    expect(charged).toBeGreaterThan(0n);
    expect(value(text, 'tollgate_charged_microdollars_total{chain="base",model="model-haiku-4-5"}')).toBe(
      Number(charged),
    );
    expectSoundLedger(db);
    db.close();
  });
});
