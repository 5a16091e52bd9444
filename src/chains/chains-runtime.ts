import { setTimeout as sleep } from "node:timers/promises";
import { formatUnits } from "viem";
import type { ChainConfig, ChainRegistry } from "../core/billing/chain-registry.js";
import type { ChainDirectory } from "../core/billing/onchain-billing.js";
import type { HealthProbe } from "../core/health-service.js";
import { newId } from "../core/ids.js";
import { type ChainRoles, type ChainWorkStore, SOLE_PROCESS_ROLES } from "../core/ports/chain-work.js";
import type { ChainAdapter } from "../core/ports/chains.js";
import { type AdapterOptions, createChainAdapter } from "./adapter-factory.js";
import { AddressBook } from "./address-book.js";
import { DepositWatcher } from "./deposit-watcher.js";
import { SettlementWorker } from "./settlement-worker.js";

/** How the runtime watches, settles and retries. */
export interface ChainsRuntimeOptions {
  /** The store the watchers credit and the settlement workers move money through. */
  readonly store: ChainWorkStore;
  /**
   * Who runs each chain's loops: every process on a PostgreSQL store competes for each chain's
   * role and only its holder ticks; on SQLite (one host) this process always holds them.
   */
  readonly roles?: ChainRoles;
  readonly registry: ChainRegistry;
  readonly masterSecret: Uint8Array;
  readonly settlement: { readonly mode: "per-call" | "batch"; readonly batchWindowMs: number };
  /** Pause between two watcher scans, and between two settlement passes. */
  readonly pollMs: number;
  /** The most positions one deposit scan covers. */
  readonly scanRange: number;
  /** Where a chain never scanned before starts (see {@link DepositWatcher}). */
  readonly startAt: "genesis" | "finalized";
  readonly now?: () => number;
  /** Operator-facing lines (a chain without an adapter, …). */
  readonly log?: (line: string) => void;
  /** Failures of a tick (an RPC outage); the loop backs off and continues. */
  readonly onError?: (error: unknown, context: string) => void;
  /** Run only these chains (dev mode: those with a local chain); all when absent. */
  readonly only?: ReadonlySet<string>;
  /** Builds adapters; the family factory unless a test substitutes one. */
  readonly createAdapter?: (chain: ChainConfig, options: AdapterOptions) => Promise<ChainAdapter>;
}

/** One chain's moving parts. */
interface ChainRuntime {
  readonly adapter: ChainAdapter;
  readonly book: AddressBook;
  readonly watcher: DepositWatcher;
  readonly worker: SettlementWorker;
}

const MAX_BACKOFF_MS = 5 * 60_000;
const PROBE_TIMEOUT_MS = 1_500;
/** The most backlog items a health probe counts ("10000+" beyond): the count stays a bounded read. */
const BACKLOG_GLANCE = 10_000;

/**
 * Every chain's adapter, deposit watcher and settlement worker, built from the registry by
 * family, and the {@link ChainDirectory} the core asks for deposit addresses. Nothing outside
 * `src/chains/` learns a chain's family from it. {@link start} runs one watcher loop and one
 * settlement loop per chain; an RPC outage makes a loop back off, never stops billing.
 */
export class ChainsRuntime implements ChainDirectory {
  private readonly abort = new AbortController();
  private loops: Promise<void>[] = [];
  /** Whether this process ran each chain at its last try (role changes are logged). */
  private readonly running = new Map<string, boolean>();

  private constructor(
    private readonly options: ChainsRuntimeOptions,
    private readonly chains: ReadonlyMap<string, ChainRuntime>,
    /** Chains without an adapter, and why. */
    private readonly missing: ReadonlyMap<string, string>,
    private readonly repo: ChainWorkStore,
  ) {}

  /**
   * Builds an adapter for every chain of the registry. A chain whose family's adapter cannot be
   * built is left out with a log line (its onchain features refuse with CHAINS_UNAVAILABLE).
   */
  static async create(options: ChainsRuntimeOptions): Promise<ChainsRuntime> {
    const now = options.now ?? Date.now;
    const repo = options.store;
    const create = options.createAdapter ?? createChainAdapter;
    const books = new Map<string, AddressBook>();
    const chains = new Map<string, ChainRuntime>();
    const missing = new Map<string, string>();
    for (const chain of options.registry.chains) {
      if (options.only !== undefined && !options.only.has(chain.id)) {
        missing.set(chain.id, "no local dev chain for it");
        continue;
      }
      let adapter: ChainAdapter;
      try {
        adapter = await create(chain, { masterSecret: options.masterSecret });
      } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        missing.set(chain.id, reason);
        options.log?.(`chains: ${chain.id}: no adapter, onchain features off for it (${reason})`);
        continue;
      }
      let book = books.get(chain.family);
      if (book === undefined) {
        book = new AddressBook(repo, adapter, now);
        books.set(chain.family, book);
      }
      const watcher = new DepositWatcher(adapter, book, repo, {
        maxRange: BigInt(options.scanRange),
        startAt: options.startAt,
        now,
      });
      const worker = new SettlementWorker(adapter, repo, {
        mode: options.settlement.mode,
        batchWindowMs: options.settlement.batchWindowMs,
        recheckMs: options.pollMs,
        maxBackoffMs: MAX_BACKOFF_MS,
        newId: () => newId("stl"),
        now,
        onError: (error, transfer) => options.onError?.(error, `settlement ${transfer.id} on ${chain.id}`),
      });
      chains.set(chain.id, { adapter, book, watcher, worker });
    }
    return new ChainsRuntime(options, chains, missing, repo);
  }

  has(chainId: string): boolean {
    return this.chains.has(chainId);
  }

  async depositAddress(chainId: string, accountId: string): Promise<string> {
    const runtime = this.chains.get(chainId);
    if (runtime === undefined) throw new Error(`chain ${chainId} has no adapter`);
    return await runtime.book.addressOf(accountId);
  }

  isValidAddress(chainId: string, address: string): boolean {
    return this.chains.get(chainId)?.adapter.isValidAddress(address) ?? false;
  }

  treasuryAddress(chainId: string): string | undefined {
    return this.chains.get(chainId)?.adapter.treasuryAddress();
  }

  async fundingTransaction(
    chainId: string,
    from: string,
    accountId: string,
    amount: bigint,
  ): Promise<Uint8Array | undefined> {
    const runtime = this.chains.get(chainId);
    if (runtime?.adapter.fundingTransaction === undefined) return undefined;
    // Handing out the address is what makes the watcher look for deposits to it.
    await runtime.book.addressOf(accountId);
    return await runtime.adapter.fundingTransaction(from, accountId, amount);
  }

  /** The adapter of a chain (reconciliation, tests). */
  adapter(chainId: string): ChainAdapter | undefined {
    return this.chains.get(chainId)?.adapter;
  }

  /** Runs one watcher scan on every chain now (tests and the CLI's one-shot commands), role or not. */
  async scanOnce(): Promise<void> {
    for (const runtime of this.chains.values()) await runtime.watcher.tick();
  }

  /** Runs one settlement pass on every chain now. */
  async settleOnce(): Promise<void> {
    for (const runtime of this.chains.values()) await runtime.worker.tick();
  }

  /**
   * Starts the watcher and settlement loops of every chain, in this thread: the chains worker
   * does (chains-worker.ts), never a gateway's request loop.
   */
  start(): void {
    if (this.loops.length > 0) return;
    for (const [id, runtime] of this.chains) {
      this.loops.push(
        this.loop(id, `deposit watcher on ${id}`, () => runtime.watcher.tick()),
        this.loop(id, `settlement worker on ${id}`, () => runtime.worker.tick()),
      );
    }
  }

  /** Stops the loops (finishing the tick in progress), gives up the roles and closes the adapters. */
  async stop(): Promise<void> {
    this.abort.abort();
    await Promise.all(this.loops);
    this.loops = [];
    await this.options.roles?.close();
    await Promise.all([...this.chains.values()].map((r) => r.adapter.close().catch(() => {})));
  }

  /**
   * One health check per chain: RPC reachability and head, the watcher's lag behind the
   * finality line, and the settlement backlog. Not required: a chain outage delays deposits
   * and settlement but never stops calls. Run in the background (HealthMonitor); the detail
   * names the treasury and its balance, so only the operator's HealthService.Inspect shows it.
   */
  probes(): HealthProbe[] {
    const probes: HealthProbe[] = [];
    for (const chain of this.options.registry.chains) {
      const runtime = this.chains.get(chain.id);
      probes.push({
        name: `chain:${chain.id}`,
        required: false,
        check: async () => {
          if (runtime === undefined)
            throw new Error(`no adapter: ${this.missing.get(chain.id) ?? "unknown"}`);
          const health = await Promise.race([
            runtime.adapter.health(),
            sleep(PROBE_TIMEOUT_MS, { reachable: false, head: undefined, error: "RPC timed out" } as const, {
              ref: false,
            }),
          ]);
          if (!health.reachable) throw new Error(`RPC unreachable: ${health.error ?? "unknown error"}`);
          // The treasury pays every transfer's fee: without it settlements and withdrawals wait.
          const fees = await runtime.adapter.treasuryFees();
          const treasury = `treasury ${runtime.adapter.treasuryAddress()}`;
          const held = `${formatUnits(fees.balance, fees.decimals)} ${fees.symbol}`;
          if (fees.balance < fees.oneTransfer) {
            throw new Error(
              `${treasury} holds ${held}, less than one transfer's fee ` +
                `(${formatUnits(fees.oneTransfer, fees.decimals)} ${fees.symbol}): settlements and ` +
                "withdrawals wait until it is funded",
            );
          }
          // The watcher may run in another thread or process: its progress is the stored cursor.
          const cursor = await this.repo.cursor(chain.id);
          const finalized = await runtime.adapter.finalizedPosition();
          const lag = cursor === undefined ? undefined : finalized >= cursor ? finalized - cursor + 1n : 0n;
          // Bounded: a probe reads at most BACKLOG_GLANCE rows, however large the outbox.
          const backlog = await this.repo.backlogGlance(chain.id, BACKLOG_GLANCE);
          const waiting = backlog.waiting >= BACKLOG_GLANCE ? `${BACKLOG_GLANCE}+` : `${backlog.waiting}`;
          return (
            `rpc ok, head ${health.head}; watcher lag ${lag ?? "? (never scanned)"} (finalized ${finalized}, ` +
            `next ${cursor ?? "?"}); settlement backlog ${waiting}; ${treasury} holds ${held}` +
            (backlog.lastError ? ` (last error: ${backlog.lastError})` : "")
          );
        },
      });
    }
    return probes;
  }

  private async loop(chain: string, name: string, tick: () => Promise<unknown>): Promise<void> {
    const { signal } = this.abort;
    const roles = this.options.roles ?? SOLE_PROCESS_ROLES;
    let failures = 0;
    while (!signal.aborted) {
      try {
        // Another process runs this chain now: wait, and try for the role again next time.
        const held = await roles.hold(chain);
        if (this.running.get(chain) !== held) {
          this.running.set(chain, held);
          if (this.options.roles !== undefined)
            this.options.log?.(
              `chains: ${chain}: ${held ? "this process runs it now" : "another process runs it"}`,
            );
        }
        if (held) await tick();
        failures = 0;
      } catch (error) {
        failures += 1;
        this.options.onError?.(error, name);
      }
      const wait = Math.min(this.options.pollMs * 2 ** Math.min(failures, 20), MAX_BACKOFF_MS);
      try {
        await sleep(wait, undefined, { signal });
      } catch {
        return;
      }
    }
  }
}
