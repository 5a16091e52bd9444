import { channel } from "node:diagnostics_channel";
import { describe, expect, it } from "vitest";
import { type BatchAnswer, Batches } from "./batches.js";

/** A statement the test answers by hand: each call waits until the test lets it go. */
class Statements {
  readonly alone: { item: number; done: (value: string) => void }[] = [];
  readonly together: { items: readonly number[]; done: (answers: BatchAnswer<string>[] | Error) => void }[] =
    [];

  batches(limits = { inFlight: 2, size: 4, slowMs: 10_000 }): Batches<number, string> {
    return new Batches<number, string>(
      (item) => new Promise((resolve) => this.alone.push({ item, done: resolve })),
      (items) =>
        new Promise((resolve, reject) =>
          this.together.push({
            items,
            done: (answers) => (answers instanceof Error ? reject(answers) : resolve(answers)),
          }),
        ),
      limits,
    );
  }
}

const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

/**
 * Sends `first` alone (the one slot taken), queues what `queue` sends behind it, and lets `first`
 * finish: what was queued has then gone as one batch, waiting for the test's answer.
 */
async function behind<Q>(
  s: Statements,
  batches: Batches<number, string>,
  first: number,
  queue: () => Q,
): Promise<Q> {
  const blocker = batches.run(first);
  const queued = queue();
  await tick();
  s.alone.at(-1)!.done(`a${first}`);
  await blocker;
  await tick();
  return queued;
}

describe("Batches", () => {
  it("sends an item alone while the limit is not reached", async () => {
    const s = new Statements();
    const batches = s.batches();
    const one = batches.run(1);
    const two = batches.run(2);
    await tick();
    expect(s.alone.map((a) => a.item)).toEqual([1, 2]);
    expect(s.together).toEqual([]);
    s.alone[0]!.done("a1");
    s.alone[1]!.done("a2");
    expect([await one, await two]).toEqual(["a1", "a2"]);
    expect(batches.sent).toEqual({ batches: 0, items: 0, retried: 0 });
  });

  it("sends the items that arrive while the limit is reached together, each answered as its own", async () => {
    const s = new Statements();
    const batches = s.batches();
    const first = [batches.run(1), batches.run(2)];
    const waiting = [3, 4, 5, 6, 7].map((i) => batches.run(i));
    await tick();
    expect(s.together).toEqual([]);
    s.alone[0]!.done("a1");
    await first[0];
    await tick();
    // One slot free: the next batch takes as many as a batch may carry, in arrival order.
    expect(s.together.map((t) => t.items)).toEqual([[3, 4, 5, 6]]);
    s.together[0]!.done([{ value: "t3" }, { value: "t4" }, { value: "t5" }, { value: "t6" }]);
    await tick();
    // The one left over goes as soon as a slot is free again: alone, since it is alone.
    expect(s.alone.map((a) => a.item)).toEqual([1, 2, 7]);
    s.alone[1]!.done("a2");
    s.alone[2]!.done("a7");
    expect(await Promise.all([...first, ...waiting])).toEqual(["a1", "a2", "t3", "t4", "t5", "t6", "a7"]);
    expect(batches.sent).toEqual({ batches: 1, items: 4, retried: 0 });
  });

  it("sends an item the batch names as failed again alone; a batch that fails fails each of its items", async () => {
    const s = new Statements();
    const batches = s.batches({ inFlight: 1, size: 8, slowMs: 10_000 });
    const items = await behind(s, batches, 0, () => [1, 2, 3].map((i) => batches.run(i)));
    s.together[0]!.done([{ value: "t1" }, { failed: "55P03" }, { value: "t3" }]);
    await tick();
    expect(s.alone.map((a) => a.item)).toEqual([0, 2]);
    s.alone[1]!.done("a2 again");
    expect(await Promise.all(items)).toEqual(["t1", "a2 again", "t3"]);
    expect(batches.sent).toEqual({ batches: 1, items: 3, retried: 1 });

    const lost = await behind(s, batches, 10, () =>
      [11, 12].map((i) => batches.run(i).catch((error: Error) => error.message)),
    );
    s.together[1]!.done(new Error("connection terminated"));
    expect(await Promise.all(lost)).toEqual(["connection terminated", "connection terminated"]);
    // A batch that failed whole sent nothing again: its calls failed as each alone would have.
    expect(batches.sent).toEqual({ batches: 2, items: 5, retried: 1 });
  });

  it("tells the timeline's channel each batch's size and the SQLSTATEs of its items sent again", async () => {
    const seen: unknown[] = [];
    const listen = (message: unknown) => seen.push(message);
    const answered = channel("tollgate:ledger:batch");
    answered.subscribe(listen);
    try {
      const s = new Statements();
      const batches = s.batches({ inFlight: 1, size: 8, slowMs: 10_000 });
      const items = await behind(s, batches, 0, () => [1, 2, 3].map((i) => batches.run(i)));
      expect(seen).toEqual([]);
      s.together[0]!.done([{ failed: "55P03" }, { value: "t2" }, { failed: "40P01" }]);
      await tick();
      expect(seen).toEqual([{ items: 3, failed: ["55P03", "40P01"] }]);
      s.alone[1]!.done("a1 again");
      s.alone[2]!.done("a3 again");
      expect(await Promise.all(items)).toEqual(["a1 again", "t2", "a3 again"]);
      expect(seen).toHaveLength(1);
    } finally {
      answered.unsubscribe(listen);
    }
  });

  it("refuses a batch answer that does not answer each item", async () => {
    const s = new Statements();
    const batches = s.batches({ inFlight: 1, size: 8, slowMs: 10_000 });
    const items = await behind(s, batches, 0, () =>
      [1, 2].map((i) => batches.run(i).catch((error: Error) => error.message)),
    );
    s.together[0]!.done([{ value: "t1" }]);
    expect(await Promise.all(items)).toEqual([
      "a batch of 2 answered 1 items",
      "a batch of 2 answered 1 items",
    ]);
  });

  it("stops counting a slow statement against the limit, so the next ones do not wait for it", async () => {
    const s = new Statements();
    const batches = s.batches({ inFlight: 1, size: 8, slowMs: 30 });
    const stuck = batches.run(1);
    const next = batches.run(2);
    await tick();
    expect(s.alone.map((a) => a.item)).toEqual([1]);
    await new Promise((resolve) => setTimeout(resolve, 60));
    expect(s.alone.map((a) => a.item)).toEqual([1, 2]);
    s.alone[1]!.done("a2");
    expect(await next).toBe("a2");
    s.alone[0]!.done("a1");
    expect(await stuck).toBe("a1");
  });
});
