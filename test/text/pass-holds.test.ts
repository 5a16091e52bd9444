import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { accountWithKey } from "../helpers/app.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// Server tools paid pass by pass (issue 31): a call that may loop holds its first pass, raises
// the hold before each pass boundary the stream shows, and ends paused when a raise is declined.
// The dev upstream runs the loop over a real socket: `[searches:N]` in the prompt makes its
// executor search N times, a pass before each.

/** A web search call of `searches` searches (max_uses 8), as the SDK sends it. */
function searchCall(searches: number, stream: boolean) {
  return {
    model: "model-sonnet-4-6",
    max_tokens: 1024,
    stream,
    messages: [
      { role: "user" as const, content: `search the web for tollgate pricing [searches:${searches}]` },
    ],
    tools: [{ type: "web_search_20250305" as const, name: "web_search" as const, max_uses: 8 }],
  };
}

interface Raise {
  readonly pass: number;
  readonly amount: bigint;
}

let t: TextGateway;
beforeAll(async () => {
  t = await startTextGateway();
});
afterAll(async () => {
  await t.close();
});

/** A fresh account with `funds` µ$ on base, and an SDK client for its key. */
async function wallet(funds: bigint) {
  const account = await accountWithKey(t.gateway.operator, `w${Math.random()}`);
  if (funds > 0n) await t.credit(funds, "base", account.accountId);
  const client = new Anthropic({ baseURL: t.baseUrl, apiKey: account.secret, maxRetries: 0 });
  return { ...account, client };
}

/** The raises of an account's calls, oldest first, from the ledger file (white-box). */
function raisesOf(accountId: string): Raise[] {
  const rows = t.gateway.db
    .prepare(
      `SELECT r.pass, r.amount FROM hold_raises r JOIN holds h ON h.id = r.hold_id
       WHERE h.account_id = ? ORDER BY h.seq, r.pass`,
    )
    .safeIntegers()
    .all(accountId) as { pass: bigint; amount: bigint }[];
  return rows.map((r) => ({ pass: Number(r.pass), amount: r.amount }));
}

/** The one call of an account: its hold as placed and what it was charged. */
async function onlyCall(accountId: string) {
  const rows = await t.usage(accountId);
  expect(rows).toHaveLength(1);
  return rows[0]!;
}

/** Runs a streamed call to its end through the SDK (which checks the stream's shape). */
async function streamed(client: Anthropic, searches: number) {
  const events: string[] = [];
  const stream = client.messages.stream(searchCall(searches, true) as never);
  stream.on("streamEvent", (event) => events.push(event.type));
  const message = await stream.finalMessage();
  return { message, events };
}

describe("a call held pass by pass", () => {
  // What one web search call holds and raises, learnt from a wallet that covers it all.
  let first: bigint;
  let raises: Raise[];
  beforeAll(async () => {
    const rich = await wallet(100_000_000n);
    const { message } = await streamed(rich.client, 5);
    expect(message.stop_reason).toBe("end_turn");
    const row = await onlyCall(rich.accountId);
    raises = raisesOf(rich.accountId);
    first = row.heldAmount - raises.reduce((sum, r) => sum + r.amount, 0n);
    expect(row.status).toBe(HoldStatus.SETTLED);
    expect(row.amount).toBeLessThanOrEqual(row.heldAmount);
    // Five searches: five boundaries, each raised before it went out.
    expect(raises.map((r) => r.pass)).toEqual([2, 3, 4, 5, 6]);
    t.expectSoundLedger();
  });

  it("holds one pass first, and raises by one pass at a time", () => {
    // Before pass-by-pass holds this call held every pass the loop may run at once: $60.21.
    // One pass: the prompt's bound and max_tokens at Sonnet 4.6's rates, and the 8 searches' fees.
    expect(first).toBeGreaterThan(80_000n);
    expect(first).toBeLessThan(250_000n);
    // A raise: the next pass reads the context so far and a result held at 50,000 tokens.
    for (const raise of raises) {
      expect(raise.amount).toBeGreaterThan(300_000n);
      expect(raise.amount).toBeLessThan(500_000n);
    }
  });

  it("ends a stream paused when a raise is declined: the passes covered, then pause_turn", async () => {
    // Funds for the first pass and one raise, a micro-dollar short of the second.
    const funds = first + raises[0]!.amount + raises[1]!.amount - 1n;
    const w = await wallet(funds);
    const { message, events } = await streamed(w.client, 5);
    expect(message.stop_reason).toBe("pause_turn");
    expect(events.at(-2)).toBe("message_delta");
    expect(events.at(-1)).toBe("message_stop");
    // Two passes went out: the first search and its result, then the second pass's writing.
    const uses = message.content.filter((b) => b.type === "server_tool_use");
    const results = message.content.filter((b) => b.type === "web_search_tool_result");
    expect(uses).toHaveLength(1);
    expect(results).toHaveLength(1);
    // The provider was read no further than the declined boundary.
    const row = await onlyCall(w.accountId);
    expect(raisesOf(w.accountId).map((r) => r.amount)).toEqual([raises[0]!.amount]);
    expect(row.status).toBe(HoldStatus.SETTLED);
    expect(row.amount).toBeGreaterThan(0n);
    expect(row.amount).toBeLessThanOrEqual(row.heldAmount);
    expect(row.amount).toBeLessThanOrEqual(funds);
    // Nothing is held afterwards: what is left is the funds less the charge.
    expect(await t.available("base", w.accountId)).toBe(funds - row.amount);
    expect(t.gateway.app.counters?.count("paused_turn")).toBeGreaterThan(0);
    // The receipt shows the hold's history: the first hold and its one raise.
    const fetched = await fetch(`${t.baseUrl}/v1/receipts/${encodeURIComponent(row.requestId)}`, {
      headers: { "x-api-key": w.secret },
    });
    expect(fetched.status).toBe(200);
    const { signature } = (await fetched.json()) as { signature: string };
    const payload = JSON.parse(Buffer.from(signature.split(".")[1]!, "base64url").toString()) as {
      held: string;
      raises: { pass: number; amount: string }[];
    };
    expect(payload.held).toBe(`${row.heldAmount}`);
    expect(payload.raises).toEqual([{ pass: 2, amount: `${raises[0]!.amount}` }]);
    t.expectSoundLedger();
  });

  it("answers a paused non-streaming call as a message ending in pause_turn", async () => {
    const funds = first + raises[0]!.amount - 1n;
    const w = await wallet(funds);
    const message = await w.client.messages.create(searchCall(5, false) as never);
    expect((message as { stop_reason: string }).stop_reason).toBe("pause_turn");
    // The provider was asked for a stream: the boundaries show only there.
    const sent = t.upstream.messageRequests().at(-1)!;
    expect(sent.body).toMatchObject({ stream: true });
    const row = await onlyCall(w.accountId);
    expect(row.amount).toBeLessThanOrEqual(funds);
    expect(await t.available("base", w.accountId)).toBe(funds - row.amount);
    t.expectSoundLedger();
  });

  it("charges a non-streaming call exactly what the same call streamed is charged", async () => {
    const a = await wallet(100_000_000n);
    const b = await wallet(100_000_000n);
    const whole = await a.client.messages.create(searchCall(5, false) as never);
    const { message } = await streamed(b.client, 5);
    expect((whole as { stop_reason: string }).stop_reason).toBe("end_turn");
    expect((whole as { usage: unknown }).usage).toEqual(message.usage);
    const [rowA, rowB] = [await onlyCall(a.accountId), await onlyCall(b.accountId)];
    expect(rowA.amount).toBe(rowB.amount);
    expect(rowA.charges.find((c) => c.kind === "web_search")?.quantity).toBe(5n);
    t.expectSoundLedger();
  });

  it("refuses a wallet that cannot cover even the first pass, saying what one pass needs", async () => {
    const w = await wallet(first - 1n);
    const error = await w.client.messages.create(searchCall(5, false) as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(402);
    // What one pass needs, what is available, and the largest max_tokens that fits.
    const message = String((error as Error).message);
    expect(message).toMatch(/needs up to [\d.]+ USDC, [\d.]+ USDC is available/);
    expect(message).toContain("That is one pass of the call");
    expect(message).toMatch(/max_tokens up to \d+/);
    expect(await t.usage(w.accountId)).toEqual([]);
    t.expectSoundLedger();
  });

  it("lets 16 streams race for raises on one balance: no overdraft, each raise granted or a clean pause", async () => {
    const funds = 16n * first + 12n * raises[0]!.amount;
    const w = await wallet(funds);
    // A call whose first pass no longer fits once others raised is refused cleanly, before anything.
    const runs = await Promise.all(
      Array.from({ length: 16 }, () =>
        streamed(w.client, 5).catch((error: unknown) => {
          expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(402);
          return undefined;
        }),
      ),
    );
    const served = runs.filter((r) => r !== undefined);
    for (const { message } of served) expect(["end_turn", "pause_turn"]).toContain(message.stop_reason);
    expect(served.some((r) => r.message.stop_reason === "pause_turn")).toBe(true);
    const rows = await t.usage(w.accountId);
    expect(rows).toHaveLength(served.length);
    let charged = 0n;
    for (const row of rows) {
      expect(row.status).toBe(HoldStatus.SETTLED);
      expect(row.amount).toBeLessThanOrEqual(row.heldAmount);
      charged += row.amount;
    }
    expect(charged).toBeLessThanOrEqual(funds);
    expect(await t.available("base", w.accountId)).toBe(funds - charged);
    t.expectSoundLedger();
  });
});
