import Anthropic from "@anthropic-ai/sdk";
import { createClient } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/config.js";
import { SYSTEM_MANUAL_CREDIT } from "../../src/core/ports/ledger.js";
import {
  type DevUpstream,
  type RecordedRequest,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { openRuntime, type Runtime } from "../../src/runtime/runtime.js";
import { accountWithKey } from "../helpers/app.js";
import { tempDir } from "../helpers/process.js";

// Spend caps end to end on /v1/messages with the official SDK: 32 parallel calls against a
// key's daily cap covering K of them, and the reset at the UTC day boundary, on a gateway whose
// clock the test moves (the runtime's `now`). The ledger audit ends each test.

const HELLO = { role: "user" as const, content: "Hello" };
/** 23:59 UTC on 31 March 2026: the next day and month are a minute away. */
const BEFORE_MIDNIGHT = Date.UTC(2026, 2, 31, 23, 59);
const MIDNIGHT = Date.UTC(2026, 3, 1);

let clock = BEFORE_MIDNIGHT;
let upstream: DevUpstream;
let app: Runtime;
let operatorRuntime: Runtime;
let dir: ReturnType<typeof tempDir>;
let hang: ((request: RecordedRequest) => boolean) | undefined;
let client: Anthropic;
let accountId: string;
let keyId: string;

beforeAll(async () => {
  upstream = await startDevUpstream({
    script: (request) => (hang?.(request) ? { kind: "hang" } : undefined),
  });
  dir = tempDir();
  const config = loadConfig({
    TOLLGATE_DATA_DIR: dir.path,
    TOLLGATE_PORT: "0",
    TOLLGATE_CORE_PORT: "0",
    TOLLGATE_ANTHROPIC_URL: upstream.url,
  });
  app = await openRuntime(config, { mode: "embedded", now: () => clock });
  const facadeUrl = await app.facade!.listen({ host: "127.0.0.1", port: 0 });
  operatorRuntime = await openRuntime(config, { mode: "operator" });
  ({ accountId, keyId } = await (async () => {
    const made = await accountWithKey(createClient(AuthService, operatorRuntime.transport!), "caps");
    client = new Anthropic({ apiKey: made.secret, baseURL: facadeUrl, maxRetries: 0 });
    return made;
  })());
  await app.stores!.ledger.credit({
    entryId: "caps-funds",
    accountId,
    chain: "base",
    amount: 100_000_000n,
    from: SYSTEM_MANUAL_CREDIT,
    memo: "test funds",
    createdAt: clock,
  });
});
afterAll(async () => {
  await operatorRuntime?.close();
  await app?.close(2_000);
  await upstream?.close();
  dir?.cleanup();
});

/** The account's holds, newest first. */
const holds = (limit = 1000) => app.stores!.ledger.listHolds(accountId, 2n ** 62n, limit);

/** A call's 402, as the SDK raises it. */
async function refused(call: Promise<unknown>) {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(Anthropic.APIError);
  return error as InstanceType<typeof Anthropic.APIError>;
}

describe("spend caps on /v1/messages", () => {
  it("32 parallel calls against a key's daily cap covering 5: exactly 5 reach the provider, 27 get a 402", async () => {
    // One call hung and abandoned, to learn the hold a call of this shape places (released: it counts 0).
    hang = () => true;
    const probe = new AbortController();
    const first = client.messages.create(
      { model: "model-haiku-4-5", max_tokens: 64, messages: [HELLO] },
      {
        signal: probe.signal,
      },
    );
    await expect.poll(() => upstream.requests.length, { timeout: 10_000 }).toBe(1);
    probe.abort();
    await first.catch(() => undefined);
    await expect
      .poll(async () => (await holds(1))[0]?.resolution?.status, { timeout: 10_000 })
      .toBe("released");
    const held = (await holds(1))[0]!.hold.amount;

    await app.stores!.ledger.setSpendCap(
      { accountId, keyId, chain: "base", period: "day", amount: 5n * held },
      clock,
    );
    const aborts = Array.from({ length: 32 }, () => new AbortController());
    let answered = 0;
    const calls = aborts.map((a) =>
      client.messages
        .create({ model: "model-haiku-4-5", max_tokens: 64, messages: [HELLO] }, { signal: a.signal })
        .then(
          () => "answered",
          (e: unknown) => e,
        )
        .finally(() => answered++),
    );
    try {
      // The placed calls hang at the provider, their holds open; the others are refused meanwhile.
      await expect.poll(() => answered, { timeout: 20_000 }).toBe(27);
      expect(upstream.requests).toHaveLength(6);
    } finally {
      for (const a of aborts) a.abort();
      hang = undefined;
    }
    const outcomes = await Promise.all(calls);
    const refusals = outcomes.filter((o) => o instanceof Anthropic.APIError && o.status === 402);
    expect(refusals).toHaveLength(27);
    expect(upstream.requests).toHaveLength(6);
    const error = refusals[0] as InstanceType<typeof Anthropic.APIError>;
    expect(error.headers?.get("x-should-retry")).toBe("false");
    expect((error.error as { error: { type: string } }).error.type).toBe("billing_error");
    expect(error.message).toContain(`key ${keyId}'s daily cap`);
    expect(error.message).toContain(`resets at ${new Date(MIDNIGHT).toISOString()}`);
    // Nothing was charged or held for a refused call: 6 holds in all, none left open.
    await expect
      .poll(async () => (await holds()).filter((h) => h.resolution === undefined).length, { timeout: 10_000 })
      .toBe(0);
    expect(await holds()).toHaveLength(6);
    expect(await app.stores!.audit()).toEqual([]);
  });

  it("a daily cap resets at the UTC day boundary, by the gateway's clock", async () => {
    await app.stores!.ledger.clearSpendCap({ accountId, keyId, chain: "base", period: "day" });
    await client.messages.create({ model: "model-haiku-4-5", max_tokens: 64, messages: [HELLO] });
    const [settled] = await holds(1);
    expect(settled!.resolution?.status).toBe("settled");
    // A cap of one hold: what the settled call charged leaves less than another hold.
    await app.stores!.ledger.setSpendCap(
      { accountId, keyId, chain: "base", period: "day", amount: settled!.hold.amount },
      clock,
    );
    const error = await refused(
      client.messages.create({ model: "model-haiku-4-5", max_tokens: 64, messages: [HELLO] }),
    );
    expect(error.status).toBe(402);
    expect(error.message).toContain(`resets at ${new Date(MIDNIGHT).toISOString()}`);
    clock = MIDNIGHT - 1;
    expect(
      (await refused(client.messages.create({ model: "model-haiku-4-5", max_tokens: 64, messages: [HELLO] })))
        .status,
    ).toBe(402);
    clock = MIDNIGHT;
    const message = await client.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 64,
      messages: [HELLO],
    });
    expect(message.content[0]?.type).toBe("text");
    const [after] = await holds(1);
    expect(after!.hold.createdAt).toBe(MIDNIGHT);
    expect(after!.resolution?.status).toBe("settled");
    expect(await app.stores!.audit()).toEqual([]);
  });
});
