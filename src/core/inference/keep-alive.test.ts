import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { withKeepAlive } from "./keep-alive.js";

async function* paced(items: readonly [string, number][]) {
  for (const [item, delayMs] of items) {
    await sleep(delayMs);
    yield item;
  }
}

async function collect(source: AsyncIterator<string>, intervalMs: number) {
  const out: string[] = [];
  for await (const item of withKeepAlive(source, intervalMs, "ping")) out.push(item);
  return out;
}

describe("withKeepAlive", () => {
  it("relays a lively source unchanged", async () => {
    const items = await collect(
      paced([
        ["a", 0],
        ["b", 5],
        ["c", 5],
      ]),
      200,
    );
    expect(items).toEqual(["a", "b", "c"]);
  });

  it("pings while the source is silent, then goes on with what it sends", async () => {
    const items = await collect(
      paced([
        ["a", 0],
        ["b", 230],
        ["c", 0],
      ]),
      100,
    );
    expect(items[0]).toBe("a");
    expect(items.slice(-2)).toEqual(["b", "c"]);
    const pings = items.filter((i) => i === "ping").length;
    expect(pings).toBeGreaterThanOrEqual(1);
    expect(pings).toBeLessThanOrEqual(3);
  });

  it("stops the source when the consumer stops early", async () => {
    let closed = false;
    async function* source() {
      try {
        yield "a";
        yield "b";
      } finally {
        closed = true;
      }
    }
    for await (const item of withKeepAlive(source(), 100, "ping")) {
      expect(item).toBe("a");
      break;
    }
    await sleep(1);
    expect(closed).toBe(true);
  });
});
