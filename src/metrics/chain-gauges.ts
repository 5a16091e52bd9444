import type { ChainWorkStore } from "../core/ports/chain-work.js";
import type { ChainAdapter } from "../core/ports/chains.js";
import { microdollars, type PrometheusMetrics } from "./prometheus.js";

/** What the chain gauges read: the store's backlog and cursors, and each chain's adapter. */
export interface ChainGaugeSources {
  /** The chains that run here (each with an adapter), in registry order. */
  readonly chains: readonly string[];
  readonly adapter: (chainId: string) => ChainAdapter | undefined;
  readonly store: ChainWorkStore;
  readonly now: () => number;
}

/** A chain's RPC is given this long per scrape; past it, its RPC gauges are left out. */
const RPC_TIMEOUT_MS = 1_500;

/**
 * Per-chain gauges read at each scrape, from what the health probes read too: the settlement
 * backlog and its oldest waiting item (from the store, shared with the chains worker wherever it
 * runs), and over each chain's RPC the watcher's lag and the treasury's balances. A chain whose
 * RPC does not answer in time simply has no RPC values in that scrape.
 */
export function addChainGauges(metrics: PrometheusMetrics, sources: ChainGaugeSources): void {
  metrics.gauge(
    "tollgate_settlement_backlog",
    "What waits for the chain: charged calls not yet in a transfer, open settlements and open withdrawals.",
    ["chain", "kind"],
    async (set) => {
      for (const row of await sources.store.backlog()) {
        set({ chain: row.chain, kind: "unbatched_calls" }, row.unbatchedCalls);
        set({ chain: row.chain, kind: "open_settlements" }, row.openSettlements);
        set({ chain: row.chain, kind: "open_withdrawals" }, row.openWithdrawals);
      }
    },
  );
  metrics.gauge(
    "tollgate_settlement_oldest_waiting_seconds",
    "Age of the oldest charge or transfer not yet confirmed onchain; 0 when nothing waits.",
    ["chain"],
    async (set) => {
      const now = sources.now();
      for (const row of await sources.store.backlog())
        set({ chain: row.chain }, row.oldestAt === 0 ? 0 : Math.max(now - row.oldestAt, 0) / 1000);
    },
  );
  metrics.gauge(
    "tollgate_deposit_watcher_lag_blocks",
    "Finalized positions (blocks, slots) the deposit watcher has not scanned yet.",
    ["chain"],
    (set) =>
      eachChain(sources, async (chain, adapter) => {
        const cursor = await sources.store.cursor(chain);
        if (cursor === undefined) return;
        const finalized = await adapter.finalizedPosition();
        set({ chain }, finalized >= cursor ? Number(finalized - cursor + 1n) : 0);
      }),
  );
  metrics.gauge(
    "tollgate_treasury_balance_microdollars",
    "The treasury's stablecoin balance onchain, in micro-dollars.",
    ["chain"],
    (set) =>
      eachChain(sources, async (chain, adapter) => {
        const balance = await adapter.balanceOf(adapter.treasuryAddress());
        set({ chain }, microdollars(balance, adapter.chain.asset.decimals));
      }),
  );
  metrics.gauge(
    "tollgate_treasury_fee_balance",
    "The treasury's native balance, which pays every transfer's fee, in whole native units (ETH, SOL).",
    ["chain", "symbol"],
    (set) =>
      eachChain(sources, async (chain, adapter) => {
        const fees = await adapter.treasuryFees();
        set({ chain, symbol: fees.symbol }, Number(fees.balance) / 10 ** fees.decimals);
      }),
  );
}

/** Reads every chain at once, each bounded by {@link RPC_TIMEOUT_MS}; a chain that fails is skipped. */
async function eachChain(
  sources: ChainGaugeSources,
  read: (chain: string, adapter: ChainAdapter) => Promise<void>,
): Promise<void> {
  await Promise.all(
    sources.chains.map(async (chain) => {
      const adapter = sources.adapter(chain);
      if (adapter === undefined) return;
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, RPC_TIMEOUT_MS);
      });
      await Promise.race([read(chain, adapter).catch(() => {}), timeout]);
      clearTimeout(timer);
    }),
  );
}
