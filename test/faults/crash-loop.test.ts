/**
 * Crashes at random moments (issue 18, item 4). A loop of rounds; each round starts a random
 * operation — text calls (whole or streamed), image calls, a deposit being credited, a
 * settlement being broadcast, a withdrawal — SIGKILLs `tollgate serve` or `tollgate worker` (or
 * both) at a random point of it, and restarts what it killed on the same SQLite data, with the
 * dev chain (anvil) and the stand-in provider running on in this process. After every restart:
 *
 * - nothing acknowledged is lost: every call whose answer the client received in full, since the
 *   start of the run, is settled for exactly its charge (and listed in the restarted gateway's
 *   usage); every answered withdrawal is recorded; every deposit the client saw credited still is;
 * - no hold is left once the sweeper has run (holds of killed calls are voided, charging nothing);
 * - the ledger audit holds (conservation, balances replayed, holds, and the onchain tables);
 * - no usage row is charged above its hold;
 * - the dev chain's Transfer logs and balances agree with the ledger: nothing paid out of a
 *   deposit address twice or without a record, nothing credited twice or left uncredited.
 * At the end every transfer is driven to confirmation and the chain must match the ledger exactly.
 *
 * The random choices come from a seed, fixed by default like the fuzzer's so that CI runs the
 * same rounds each time; TOLLGATE_CRASH_SEED=<n> runs others (the kill moments are times, so a
 * replay lands near, not exactly on, the same instruction). The seed is printed at the start and
 * in every failure. TOLLGATE_CRASH_ROUNDS sets the number of rounds (100 by default).
 */
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { type Address, getAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../../src/core/billing/default-catalog.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { type Rng, rng } from "../billing/prng.js";
import { until } from "../helpers/process.js";
import type { BroadcastPhase } from "../helpers/rpc-proxy.js";
import { expectedCharge } from "../helpers/text-gateway.js";
import {
  type Acknowledged,
  ChainReader,
  checkAcknowledged,
  checkChainAgainstLedger,
  openHolds,
} from "./crash-checks.js";
import { CRASH_SETTINGS, type CrashRig, startCrashRig, type Target } from "./crash-rig.js";

const SEED = Number(process.env.TOLLGATE_CRASH_SEED ?? 20261124);
const ROUNDS = Number(process.env.TOLLGATE_CRASH_ROUNDS ?? 100);
const IMAGE_PRICE = defaultPriceCatalog().images.get("image-pro")!.perImage.get("1K")!;
const ACCOUNTS = 3;
/** Each account's deposit at the start, in ledger units (µ$ on the 6-decimal test stablecoin). */
const START_FUNDS = 1_000_000_000n;
const WORDS = "harbour lantern copper meadow quiet river signal amber orchard velvet winter needle".split(
  " ",
);

type Op = "text" | "stream" | "image" | "deposit" | "settlement" | "withdrawal";
const OPS: readonly Op[] = ["text", "stream", "image", "deposit", "settlement", "withdrawal"];
/** What serve does while it is killed at a fraction of the time it usually takes. */
type Timed = "text" | "stream" | "image" | "withdraw";

/** Where a round's kill lands. */
type Kill =
  /** At this fraction (0 to 2) of how long the operation usually takes: before, inside or after it. */
  | { readonly kind: "fraction"; readonly of: number }
  /** When the client has received k text deltas of the first stream (or right after it ended). */
  | { readonly kind: "deltas"; readonly k: number }
  /** This long after the operation started (the worker's work comes in ticks of 100 ms). */
  | { readonly kind: "delay"; readonly ms: number }
  /** At the worker's next broadcast, before or after the chain has the transaction. */
  | { readonly kind: "broadcast"; readonly phase: BroadcastPhase };

/** One round, drawn from the seed. */
interface Plan {
  readonly op: Op;
  /** Which account acts. */
  readonly account: number;
  /** How many calls run at once (call rounds). */
  readonly calls: number;
  readonly kill: Kill;
  /** The process the kill is for; the other one dies with it when `both`. */
  readonly target: Target;
  readonly both: boolean;
  /** Deposit or withdrawal amount, in ledger units. */
  readonly amount: bigint;
  /** A fresh withdrawal recipient. */
  readonly to: Address;
  /** Seeds the round's prompts and token limits. */
  readonly seed: number;
}

/** The round's random choices. */
function drawPlan(r: Rng): Plan {
  const op = r.pick(OPS);
  const base = {
    op,
    account: r.int(ACCOUNTS),
    calls: 1 + r.int(3),
    both: r.int(6) === 0,
    amount: 1_000_000n + r.big(4_000_000n),
    to: getAddress(`0x${Array.from({ length: 40 }, () => r.int(16).toString(16)).join("")}`),
    seed: r.int(2 ** 31),
  };
  const fraction: Kill = { kind: "fraction", of: r.int(2000) / 1000 };
  switch (op) {
    case "text":
    case "image":
      return { ...base, target: "serve", kill: fraction };
    case "stream":
      return { ...base, target: "serve", kill: r.int(3) === 0 ? fraction : { kind: "deltas", k: r.int(24) } };
    case "deposit":
      return { ...base, target: "worker", kill: { kind: "delay", ms: r.int(700) } };
    case "settlement":
      return { ...base, target: "worker", kill: workerKill(r) };
    case "withdrawal":
      return r.int(3) === 0
        ? { ...base, target: "serve", kill: fraction }
        : { ...base, target: "worker", kill: workerKill(r) };
  }
}

/** The worker dies at a broadcast (before or after the chain has it) or after a random delay. */
function workerKill(r: Rng): Kill {
  const choice = r.int(3);
  if (choice === 2) return { kind: "delay", ms: r.int(500) };
  return { kind: "broadcast", phase: choice === 0 ? "before" : "after" };
}

interface Account {
  readonly id: string;
  readonly secret: string;
  readonly deposit: Address;
}

/** A call the client made: what it was charged if it got the whole answer. */
interface CallOutcome {
  readonly requestId: string;
  readonly charge: bigint;
  readonly ms: number;
}

/** What a round's operation left for the checks. */
interface Done {
  /** What the kill took down, to restart. */
  readonly killed: Target[];
  /** Calls answered in full. */
  readonly answered: CallOutcome[];
  /** After the restart: drives the operation to its end (a credit, a confirmation). */
  readonly finish?: () => Promise<void>;
}

let rig: CrashRig;
let chain: ChainReader;
const accounts: Account[] = [];
const acked: Acknowledged = { calls: new Map(), withdrawals: new Map(), deposits: new Map() };
/** Every call answered in full, the overlong ones too. */
const answeredIds = new Set<string>();
/**
 * How long each operation on serve usually takes on this machine (a moving average of the
 * answered ones, started by one of each at the beginning): "fraction" kills scale with it.
 */
const typicalMs: Record<Timed, number> = { text: 0, stream: 0, image: 0, withdraw: 0 };
const figures = {
  kills: { serve: 0, worker: 0 },
  restartMs: { serve: [] as number[], worker: [] as number[] },
  ops: {} as Record<string, number>,
  answered: 0,
  cut: 0,
  withdrawalsAskedAgain: 0,
  depositsSeenBeforeKill: 0,
  /** Answered calls that ran longer than the longest call: their holds may be swept while live. */
  overlong: 0,
};

function observe(op: Timed, ms: number): void {
  typicalMs[op] = typicalMs[op] === 0 ? ms : 0.8 * typicalMs[op] + 0.2 * ms;
}

describe(`the gateway SIGKILLed at random moments (seed ${SEED}, ${ROUNDS} rounds)`, () => {
  beforeAll(async () => {
    console.log(`crash loop: seed ${SEED}, ${ROUNDS} rounds (TOLLGATE_CRASH_SEED / TOLLGATE_CRASH_ROUNDS)`);
    rig = await startCrashRig();
    chain = new ChainReader(rig.dev.rpcUrl, rig.dev.token);
    await fundAccounts();
    await timeEachOperation();
  }, 60_000);
  afterAll(async () => {
    await rig?.close();
  });

  it("loses nothing acknowledged, leaves no hold, keeps the audit, and never pays a transfer twice", async () => {
    const started = performance.now();
    const r = rng(SEED);
    for (let round = 1; round <= ROUNDS; round++) {
      const plan = drawPlan(r);
      const context = `seed ${SEED}, round ${round}: ${describePlan(plan)}`;
      try {
        await runRound(plan, round, context);
      } catch (error) {
        throw new Error(`${context}\n${(error as Error).message}\n${diagnostics()}`, { cause: error });
      }
    }
    await drain(`seed ${SEED}, after ${ROUNDS} rounds`);
    report(performance.now() - started);
  }, 600_000);
});

/** Three accounts with a key each, funded by a deposit the worker credits. */
async function fundAccounts(): Promise<void> {
  await until("the deposit watcher to start", async () =>
    rig.db.prepare("SELECT 1 FROM chain_cursors").get() === undefined ? undefined : true,
  );
  for (let i = 0; i < ACCOUNTS; i++) {
    const { account } = await rig.auth().createAccount({ name: `crash-${i}` });
    const { secret } = await rig.auth().createKey({ accountId: account!.id, name: `crash-${i}-key` });
    const { addresses } = await rig.billing().getDepositAddresses({ accountId: account!.id });
    accounts.push({ id: account!.id, secret, deposit: getAddress(addresses[0]!.address) });
  }
  for (const account of accounts) await rig.dev.mintTo(account.deposit, START_FUNDS);
  await until("the starting deposits to be credited", async () =>
    (rig.db.prepare("SELECT count(*) AS n FROM deposits").get() as { n: number }).n === ACCOUNTS
      ? true
      : undefined,
  );
}

/** One of each operation on serve, unkilled, to start the typical durations (and the checks). */
async function timeEachOperation(): Promise<void> {
  const r = rng(SEED);
  const [account] = accounts;
  const base = rig.serve().facadeUrl;
  const calls = {
    text: await textCall(base, account!.secret, prompt(r), 20),
    stream: await streamCall(base, account!.secret, prompt(r), 20, () => {}),
    image: await imageCall(base, account!.secret, prompt(r)),
  };
  for (const [op, call] of Object.entries(calls)) {
    observe(op as Timed, call.ms);
    acked.calls.set(call.requestId, call.charge);
    answeredIds.add(call.requestId);
  }
  const started = performance.now();
  const to = getAddress(`0x${"7e".repeat(20)}`);
  const { withdrawal } = await rig.billing().withdraw({
    accountId: account!.id,
    chain: "base",
    amount: 1_000_000n,
    toAddress: to,
    withdrawalId: "warm-up",
  });
  observe("withdraw", performance.now() - started);
  acked.withdrawals.set(withdrawal!.id, { amount: 1_000_000n, to });
}

async function runRound(plan: Plan, round: number, context: string): Promise<void> {
  figures.ops[plan.op] = (figures.ops[plan.op] ?? 0) + 1;
  const done = await OPERATIONS[plan.op](plan, round);
  rig.disarm();
  for (const target of done.killed) figures.kills[target] += 1;

  // Restart on the same data (both at once when both died).
  const times = await Promise.all(done.killed.map((target) => rig.restart(target)));
  for (const [i, target] of done.killed.entries()) figures.restartMs[target].push(times[i]!);

  // Acknowledged first, before the restarted processes do anything more. A call that ran longer
  // than the longest call may have had its hold swept while it ran (documented): not counted.
  for (const call of done.answered) answeredIds.add(call.requestId);
  const answered = done.answered.filter((call) => call.ms < CRASH_SETTINGS.maxCallMs);
  figures.overlong += done.answered.length - answered.length;
  figures.answered += answered.length;
  for (const call of answered) acked.calls.set(call.requestId, call.charge);
  expect(checkAcknowledged(rig.db, acked), context).toEqual([]);
  await expectListedInUsage(accounts[plan.account]!, answered, context);

  await done.finish?.();
  // No hold outlives the sweep: a killed call's hold is voided once older than the longest call.
  await soon(
    "the sweeper to void the killed calls' holds",
    () => openHolds(rig.db) === 0,
    CRASH_SETTINGS.maxCallMs + 5_000,
  );
  expect(auditLedger(rig.db), context).toEqual([]);
  expect(checkAcknowledged(rig.db, acked), context).toEqual([]);
  expect(await checkChainAgainstLedger(rig.db, chain, rig.treasury, false), context).toEqual([]);
}

/** Kills the plan's target (and the other process when `both`); resolves with what died. */
async function killFor(plan: Plan): Promise<Target[]> {
  const targets: Target[] = plan.both ? ["serve", "worker"] : [plan.target];
  await Promise.all(targets.map((target) => rig.kill(target)));
  return targets;
}

/** Waits for the worker to die at a broadcast, then kills serve too when `both`. */
async function killedAtBroadcast(plan: Plan, broadcast: Promise<void>): Promise<Target[]> {
  await waitFor("the worker to broadcast", broadcast, 20_000);
  if (!plan.both) return ["worker"];
  await rig.kill("serve");
  return ["worker", "serve"];
}

/** How long after the start of `op` on serve its kill comes. */
function delayOf(kill: Kill, op: Timed): number {
  return kill.kind === "fraction" ? Math.round(kill.of * typicalMs[op]) : 0;
}

/** How long after the start of the worker's part its kill comes (none at a broadcast). */
function workerDelay(kill: Kill): number {
  return kill.kind === "delay" ? kill.ms : 0;
}

const OPERATIONS: Record<Op, (plan: Plan, round: number) => Promise<Done>> = {
  text: runCalls,
  stream: runCalls,
  image: runCalls,

  /** Tokens minted to a deposit address; the worker killed while it scans and credits. */
  async deposit(plan) {
    const account = accounts[plan.account]!;
    const hash = await rig.dev.mintTo(account.deposit, plan.amount);
    const key = `${hash.toLowerCase()}#${await chain.firstLogIndex(hash)}`;
    // The client watches its deposits until the kill: what it saw credited must stay so.
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const { deposits } = await rig.billing().listDeposits({ accountId: account.id });
        const seen = deposits.find((d) => `${d.txHash.toLowerCase()}#${d.index}` === key);
        if (seen?.credited === true && !acked.deposits.has(key)) {
          acked.deposits.set(key, seen.amount);
          figures.depositsSeenBeforeKill += 1;
        }
        await sleep(20);
      }
    })().catch(() => {}); // serve killed too (both): the client sees nothing more
    await sleep(workerDelay(plan.kill));
    const killed = await killFor(plan);
    watching = false;
    await watcher;
    return { killed, answered: [], finish: () => waitForDeposit(key) };
  },

  /** A call answered in full, its charge then settled onchain by a worker killed on the way. */
  async settlement(plan) {
    const account = accounts[plan.account]!;
    const broadcast = plan.kill.kind === "broadcast" ? rig.killAtBroadcast(plan.kill.phase) : undefined;
    const r = rng(plan.seed);
    const call = await textCall(rig.serve().facadeUrl, account.secret, prompt(r), 5 + r.int(30));
    observe("text", call.ms);
    let killed: Target[];
    if (broadcast !== undefined) killed = await killedAtBroadcast(plan, broadcast);
    else {
      await sleep(workerDelay(plan.kill));
      killed = await killFor(plan);
    }
    return { killed, answered: [call], finish: () => waitForSettlement(call.requestId) };
  },

  /**
   * A withdrawal: serve killed while it answers the request (the client then asks again with the
   * same withdrawal id, as it should), or the worker killed while it pays it out.
   */
  async withdrawal(plan, round) {
    const account = accounts[plan.account]!;
    const broadcast = plan.kill.kind === "broadcast" ? rig.killAtBroadcast(plan.kill.phase) : undefined;
    const ask = {
      accountId: account.id,
      chain: "base",
      amount: plan.amount,
      toAddress: plan.to,
      withdrawalId: `crash-round-${round}`,
    };
    const started = performance.now();
    // Handled at once: the answer may never come.
    let refusal: unknown;
    const request = rig
      .billing()
      .withdraw(ask)
      .then(
        (response) => response.withdrawal!,
        (error: unknown) => {
          refusal = error;
          return undefined;
        },
      );
    let killed: Target[] = [];
    if (plan.target === "serve") {
      await sleep(delayOf(plan.kill, "withdraw"));
      killed = await killFor(plan);
    }
    const answer = await request;
    // Only a kill excuses a withdrawal without an answer.
    if (answer === undefined && plan.target !== "serve") throw refusal;
    if (answer !== undefined) {
      observe("withdraw", performance.now() - started);
      acked.withdrawals.set(answer.id, { amount: plan.amount, to: plan.to });
    }
    if (plan.target === "worker") {
      if (broadcast !== undefined) killed = await killedAtBroadcast(plan, broadcast);
      else {
        await sleep(workerDelay(plan.kill));
        killed = await killFor(plan);
      }
    }
    const finish = async () => {
      let id = answer?.id;
      if (id === undefined) {
        figures.withdrawalsAskedAgain += 1;
        const { withdrawal } = await rig.billing().withdraw(ask);
        id = withdrawal!.id;
        acked.withdrawals.set(id, { amount: plan.amount, to: plan.to });
      }
      await waitForWithdrawal(id, plan.to, plan.amount);
    };
    return { killed, answered: [], finish };
  },
};

/** One to three calls of the round's kind at once; serve killed at a random point of them. */
async function runCalls(plan: Plan): Promise<Done> {
  const op = plan.op as "text" | "stream" | "image";
  const r = rng(plan.seed);
  const { secret } = accounts[plan.account]!;
  const baseURL = rig.serve().facadeUrl;
  let killing: Promise<Target[]> | undefined;
  const fire = () => {
    killing ??= killFor(plan);
  };
  const calls = Array.from({ length: plan.calls }, (_, i) => {
    if (op === "image") return imageCall(baseURL, secret, prompt(r));
    if (op === "text") return textCall(baseURL, secret, prompt(r), 5 + r.int(30));
    return streamCall(baseURL, secret, prompt(r), 5 + r.int(30), (count) => {
      if (i === 0 && plan.kill.kind === "deltas" && count >= plan.kill.k) fire();
    });
  });
  if (plan.kill.kind === "fraction") await sleep(delayOf(plan.kill, op)).then(fire);
  const results = await Promise.allSettled(calls);
  fire(); // a stream shorter than k deltas: the kill comes right after it
  const killed = await killing!;
  const answered: CallOutcome[] = [];
  for (const result of results) {
    if (result.status === "rejected") {
      // An answer the gateway gave (an error status, an error event) is not a kill's doing.
      if (!cutByKill(result.reason)) throw result.reason;
      figures.cut += 1;
    } else {
      answered.push(result.value);
      observe(op, result.value.ms);
    }
  }
  return { killed, answered };
}

/** Whether a call failed the way a killed gateway makes it fail: its connection went away. */
function cutByKill(error: unknown): boolean {
  if (error instanceof Anthropic.APIConnectionError || error instanceof OpenAI.APIConnectionError)
    return true;
  return error instanceof TypeError && /terminated|other side closed/.test(error.message);
}

/** The restarted gateway's own usage listing names each answered call with its charge. */
async function expectListedInUsage(account: Account, calls: readonly CallOutcome[], context: string) {
  if (calls.length === 0) return;
  const { rows } = await rig.billing().listUsage({ accountId: account.id, pageSize: 1000 });
  const byRequest = new Map(rows.map((row) => [row.requestId, row]));
  for (const call of calls) {
    const row = byRequest.get(call.requestId);
    expect({ request: call.requestId, charged: row?.amount }, context).toEqual({
      request: call.requestId,
      charged: call.charge,
    });
    expect(row!.amount <= row!.heldAmount, context).toBe(true);
  }
}

/** Calls settled by a gateway killed before their answer left: charged, though the client never heard. */
function chargedUnanswered(): number {
  const settled = rig.db
    .prepare(
      "SELECT h.request_id FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id WHERE r.status = 'settled'",
    )
    .all() as { request_id: string }[];
  return settled.filter((row) => !answeredIds.has(row.request_id)).length;
}

/** Waits for the deposit's credit (its amount is checked with the rest after every round). */
async function waitForDeposit(key: string): Promise<void> {
  const [txHash, index] = key.split("#");
  const credited = rig.db.prepare("SELECT 1 FROM deposits WHERE lower(tx_hash) = ? AND log_index = ?");
  await soon(
    `deposit ${key} to be credited`,
    () => credited.get(txHash, Number(index)) !== undefined,
    20_000,
  );
}

async function waitForSettlement(requestId: string): Promise<void> {
  const status = rig.db.prepare(
    `SELECT t.status FROM holds h JOIN settlement_intents i ON i.hold_id = h.id
       JOIN chain_transfers t ON t.id = i.transfer_id WHERE h.request_id = ?`,
  );
  await soon(
    `the settlement of ${requestId} to be confirmed`,
    () => (status.get(requestId) as { status: string } | undefined)?.status === "confirmed",
    20_000,
  );
}

async function waitForWithdrawal(id: string, to: Address, amount: bigint): Promise<void> {
  const status = rig.db.prepare("SELECT status FROM chain_transfers WHERE id = ?");
  await soon(
    `withdrawal ${id} to be confirmed`,
    () => (status.get(id) as { status: string } | undefined)?.status === "confirmed",
    20_000,
  );
  await chain.refresh();
  const received = await chain.balanceAtHead(to);
  if (received !== amount) throw new Error(`withdrawal ${id}: ${to} received ${received}, not ${amount}`);
}

/** Every transfer to confirmation; then the chain and the ledger agree exactly. */
async function drain(context: string): Promise<void> {
  await until(
    "every transfer to be confirmed",
    async () =>
      (
        rig.db.prepare("SELECT count(*) AS n FROM chain_transfers WHERE status <> 'confirmed'").get() as {
          n: number;
        }
      ).n === 0 &&
      (
        rig.db
          .prepare(
            "SELECT count(*) AS n FROM settlement_intents WHERE transfer_id IS NULL AND onchain_amount > 0",
          )
          .get() as { n: number }
      ).n === 0
        ? true
        : undefined,
    30_000,
  );
  expect(openHolds(rig.db), context).toBe(0);
  expect(auditLedger(rig.db), context).toEqual([]);
  expect(checkAcknowledged(rig.db, acked), context).toEqual([]);
  expect(await checkChainAgainstLedger(rig.db, chain, rig.treasury, true), context).toEqual([]);
  // Everything the treasury holds came from settlements the ledger confirmed, once each.
  const settled = rig.db
    .prepare("SELECT COALESCE(SUM(amount), 0) AS s FROM chain_transfers WHERE kind = 'settlement'")
    .safeIntegers(true)
    .get() as { s: bigint };
  expect(await chain.balanceAtHead(rig.treasury), context).toBe(settled.s);
}

async function textCall(
  baseURL: string,
  secret: string,
  content: string,
  maxTokens: number,
): Promise<CallOutcome> {
  const client = new Anthropic({ apiKey: secret, baseURL, maxRetries: 0 });
  const started = performance.now();
  const { data, response } = await client.messages
    .create({ model: "claude-haiku-4-5", max_tokens: maxTokens, messages: [{ role: "user", content }] })
    .withResponse();
  return {
    requestId: response.headers.get("x-request-id")!,
    charge: expectedCharge("model-haiku-4-5", {
      input: data.usage.input_tokens,
      output: data.usage.output_tokens,
    }),
    ms: performance.now() - started,
  };
}

/** A streamed call, read to its end; `onDelta` is told each text delta's number as it arrives. */
async function streamCall(
  baseURL: string,
  secret: string,
  content: string,
  maxTokens: number,
  onDelta: (count: number) => void,
): Promise<CallOutcome> {
  const client = new Anthropic({ apiKey: secret, baseURL, maxRetries: 0 });
  const started = performance.now();
  const { data: stream, response } = await client.messages
    .create({
      model: "claude-haiku-4-5",
      max_tokens: maxTokens,
      messages: [{ role: "user", content }],
      stream: true,
    })
    .withResponse();
  let input = 0;
  let output = 0;
  let deltas = 0;
  let stopped = false;
  for await (const event of stream) {
    if (event.type === "message_start") {
      input = event.message.usage.input_tokens;
      output = event.message.usage.output_tokens;
    } else if (event.type === "message_delta") {
      input = event.usage.input_tokens ?? input;
      output = event.usage.output_tokens;
    } else if (event.type === "content_block_delta") {
      onDelta(++deltas);
    } else if (event.type === "message_stop") {
      stopped = true;
    }
  }
  if (!stopped) throw new Error("the stream ended without message_stop");
  return {
    requestId: response.headers.get("x-request-id")!,
    charge: expectedCharge("model-haiku-4-5", { input, output }),
    ms: performance.now() - started,
  };
}

async function imageCall(baseURL: string, secret: string, prompt: string): Promise<CallOutcome> {
  const client = new OpenAI({ apiKey: secret, baseURL: `${baseURL}/v1`, maxRetries: 0 });
  const started = performance.now();
  const { data, response } = await client.images
    .generate({ model: "image-pro", prompt, response_format: "b64_json" })
    .withResponse();
  if (!data.data?.[0]?.b64_json) throw new Error("an image answer without an image");
  return {
    requestId: response.headers.get("x-request-id")!,
    charge: IMAGE_PRICE,
    ms: performance.now() - started,
  };
}

function prompt(r: Rng): string {
  return Array.from({ length: 3 + r.int(10) }, () => r.pick(WORDS)).join(" ");
}

/**
 * `until` at a 20 ms pace: the loop waits on the ledger a few times per round, and these probes
 * are local reads of the SQLite file.
 */
async function soon(what: string, probe: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** Rejects naming `what` when `promise` has not settled within `ms`. */
async function waitFor<T>(what: string, promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** What a failure's message shows beyond the check: open transfers and holds, and the processes' stderr. */
function diagnostics(): string {
  const transfers = rig.db
    .prepare(
      "SELECT id, kind, status, attempts, tx_hash, last_error FROM chain_transfers WHERE status <> 'confirmed'",
    )
    .all();
  const holds = rig.db.prepare("SELECT hold_id, created_at FROM open_holds").all();
  return [
    `--- open transfers ---\n${JSON.stringify(transfers, null, 1)}`,
    `--- open holds ---\n${JSON.stringify(holds)}`,
    `--- process logs ---\n${rig.logs()}`,
  ].join("\n");
}

function describePlan(plan: Plan): string {
  const kill =
    plan.kill.kind === "fraction"
      ? `at ${plan.kill.of} of its usual time`
      : plan.kill.kind === "delay"
        ? `${plan.kill.ms} ms in`
        : plan.kill.kind === "deltas"
          ? `after ${plan.kill.k} deltas`
          : `${plan.kill.phase} a broadcast`;
  const what = ["text", "stream", "image"].includes(plan.op) ? `${plan.calls} × ${plan.op}` : plan.op;
  return `${what}, kill ${plan.target}${plan.both ? " and the other" : ""} ${kill}`;
}

function report(wallMs: number): void {
  const stats = (values: number[]) => {
    if (values.length === 0) return "none";
    const sorted = [...values].sort((a, b) => a - b);
    const mean = values.reduce((a, b) => a + b, 0) / values.length;
    return `${values.length}, mean ${mean.toFixed(0)} ms, p50 ${sorted[Math.floor(sorted.length / 2)]!.toFixed(0)} ms, max ${sorted.at(-1)!.toFixed(0)} ms`;
  };
  console.log(
    [
      `crash loop: seed ${SEED}, ${ROUNDS} rounds in ${(wallMs / 1000).toFixed(1)} s`,
      `  operations: ${Object.entries(figures.ops)
        .map(([op, n]) => `${op} ${n}`)
        .join(", ")}`,
      `  kills: serve ${figures.kills.serve}, worker ${figures.kills.worker}`,
      `  restarts of serve: ${stats(figures.restartMs.serve)}`,
      `  restarts of worker: ${stats(figures.restartMs.worker)}`,
      `  calls answered in full ${figures.answered}, cut by the kill ${figures.cut}; charged though unanswered ${chargedUnanswered()}; longer than the longest call ${figures.overlong}`,
      `  withdrawals asked again after a kill ${figures.withdrawalsAskedAgain}; deposits seen credited before the kill ${figures.depositsSeenBeforeKill}`,
      `  typical ms: ${Object.entries(typicalMs)
        .map(([op, ms]) => `${op} ${ms.toFixed(0)}`)
        .join(", ")}`,
    ].join("\n"),
  );
}
