import type { AddressInfo } from "node:net";
import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, describe, expect, it } from "vitest";
import { cliJson, runCli, startGateway, tempDir } from "../helpers/process.js";

// `tollgate dev` as `make run` starts it: the metrics endpoint is on (on a port of its own), its
// URL is in the ready line, and shutting down closes it with the rest.

const dir = tempDir();
afterAll(() => dir.cleanup());

describe("tollgate dev's metrics port", () => {
  it("is announced in the ready line, counts requests and closes on SIGTERM", async () => {
    const gateway = await startGateway({ TOLLGATE_DATA_DIR: dir.path });
    const url = /tollgate ready: .* metrics (http:\/\/\S+\/metrics) /.exec(gateway.stdout())?.[1];
    expect(url).toBeDefined();
    expect(new URL(url!).port).not.toBe(new URL(gateway.facadeUrl).port);
    try {
      const health = await fetch(`${gateway.facadeUrl}/v1/health`);
      await health.text();
      const text = await (await fetch(url!)).text();
      expect(text).toMatch(
        new RegExp(
          `^tollgate_http_requests_total\\{route="/v1/health",method="GET",status="${health.status}",reason="[a-z_]+"\\} 1$`,
          "m",
        ),
      );
    } finally {
      expect(await gateway.stop()).toBe(0);
    }
    await expect(fetch(url!)).rejects.toThrow();
  });

  it("refuses to start on a metrics port in use, naming the variable", async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    try {
      const port = (taken.address() as AddressInfo).port;
      await expect(
        startGateway({ TOLLGATE_DATA_DIR: dir.path, TOLLGATE_METRICS_PORT: `${port}` }),
      ).rejects.toThrow(/metrics port 127\.0\.0\.1:\d+ is in use: set TOLLGATE_METRICS_PORT/);
    } finally {
      taken.close();
    }
  });

  it("is off with TOLLGATE_METRICS_PORT=off", async () => {
    const gateway = await startGateway({ TOLLGATE_DATA_DIR: dir.path, TOLLGATE_METRICS_PORT: "off" });
    try {
      expect(gateway.stdout()).not.toContain("metrics");
    } finally {
      await gateway.stop();
    }
  });
});

/** Polls `probe` every 150 ms until it returns a value, for at most `timeoutMs`. */
async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(150);
  }
}

/** The value of the one sample `name{labels}` in the exposition text, undefined when absent. */
function sample(text: string, name: string, labels: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? undefined : Number(line.split(" ")[1]);
}

describe("the chain gauges, on dev chains", () => {
  it("show each chain's treasury and watcher lag, and a charge waiting for its batch", async () => {
    const chainsDir = tempDir();
    const env = {
      TOLLGATE_DATA_DIR: chainsDir.path,
      TOLLGATE_DEV_CHAINS: "on",
      TOLLGATE_CHAIN_POLL_MS: "100",
    };
    const gateway = await startGateway(env, 60_000);
    try {
      const url = /tollgate ready: .* metrics (http:\/\/\S+\/metrics) /.exec(gateway.stdout())![1]!;
      const scrape = async () => (await fetch(url)).text();
      const chains = ["base", "arbitrum", "robinhood", "solana"];
      // A chain's watcher lag appears once its watcher (in the chains thread) has set its cursor,
      // and an RPC slower than the scrape's bound leaves its chain out: wait for a full scrape.
      const rpcGauges = ["tollgate_deposit_watcher_lag_blocks", "tollgate_treasury_balance_microdollars"];
      let text = await until("every chain's RPC gauges", async () => {
        const scraped = await scrape();
        const values = chains.flatMap((c) => rpcGauges.map((name) => sample(scraped, name, `chain="${c}"`)));
        return values.every((v) => v !== undefined && v >= 0) ? scraped : undefined;
      });
      // The dev treasuries are given gas for fees at start.
      expect(sample(text, "tollgate_treasury_fee_balance", 'chain="base",symbol="ETH"')).toBeGreaterThan(0);

      const account = await cliJson<{ id: string }>(["account", "create"], env);
      const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
      const faucet = await runCli(
        ["faucet", "--account", account.id, "--chain", "base", "--amount", "1"],
        env,
      );
      expect(faucet.code, faucet.stderr).toBe(0);
      await until("the deposit to be credited", async () => {
        // Proto JSON leaves out an empty list: no `deposits` until the chain shows one.
        const { deposits = [] } = await cliJson<{ deposits?: { credited?: boolean }[] }>(
          ["deposits", "--account", account.id],
          env,
        );
        return deposits[0]?.credited === true ? true : undefined;
      });
      const client = new Anthropic({ apiKey: key.secret, baseURL: gateway.facadeUrl, maxRetries: 0 });
      await client.messages.create({
        model: "model-haiku-4-5",
        max_tokens: 32,
        messages: [{ role: "user", content: "hello" }],
      });
      const { rows } = await cliJson<{ rows: { amount?: string }[] }>(
        ["usage", "--account", account.id],
        env,
      );
      // Batch settlement (the default) waits a minute: the charge is in the backlog meanwhile (for
      // at least the time the usage command took).
      text = await scrape();
      expect(sample(text, "tollgate_settlement_backlog", 'chain="base",kind="unbatched_calls"')).toBe(1);
      expect(sample(text, "tollgate_settlement_oldest_waiting_seconds", 'chain="base"')).toBeGreaterThan(0);
      expect(
        sample(text, "tollgate_charged_microdollars_total", 'chain="base",model="model-haiku-4-5"'),
      ).toBe(Number(rows[0]?.amount));
    } finally {
      await gateway.stop();
      chainsDir.cleanup();
    }
  }, 120_000);
});
