import { describe, expect, it } from "vitest";
import { UpstreamFailure } from "../ports/providers.js";
import { StreamShape } from "./relay.js";

const event = (type: string, extra: Record<string, unknown> = {}) => JSON.stringify({ type, ...extra });
const FINAL = event("message_delta", { delta: { stop_reason: "end_turn" }, usage: { output_tokens: 3 } });

/** Checks `events` in order; returns the problem of the first refused one, or undefined. */
function firstProblem(shape: StreamShape, events: [string, string][]): string | undefined {
  for (const [name, data] of events) {
    try {
      shape.check(name, data);
    } catch (error) {
      expect(error).toBeInstanceOf(UpstreamFailure);
      expect((error as UpstreamFailure).kind).toBe("malformed");
      return (error as Error).message.replace(/^.*message stream: /, "");
    }
  }
  return undefined;
}

describe("StreamShape", () => {
  it("accepts the format's stream, pings and unknown event types that keep the rules", () => {
    const shape = new StreamShape();
    expect(
      firstProblem(shape, [
        ["ping", '{"type": "ping"}'],
        ["message_start", event("message_start", { message: {} })],
        ["content_block_start", event("content_block_start", { index: 0 })],
        ["content_block_delta", event("content_block_delta", { index: 0 })],
        ["future_event", event("future_event")],
        ["content_block_stop", event("content_block_stop", { index: 0 })],
        ["message_delta", event("message_delta", { delta: { stop_reason: null } })],
        ["message_delta", FINAL],
        ["ping", event("ping")],
        ["message_stop", event("message_stop")],
      ]),
    ).toBeUndefined();
    expect(shape.ended).toBe(true);
  });

  it("ends at an error event, even one before message_start", () => {
    const shape = new StreamShape();
    shape.check("error", event("error", { error: { type: "overloaded_error" } }));
    expect(shape.ended).toBe(true);
  });

  it.each([
    ["message", event("message_start"), "an event without an event name"],
    ["content_block_delta", "not json", "content_block_delta: its data is not JSON"],
    ["content_block_delta", "[1]", "content_block_delta: its data is not a JSON object"],
    ["content_block_delta", event("ping"), 'content_block_delta: its data\'s type is "ping"'],
    ["content_block_delta", "{}", "content_block_delta: its data's type is missing"],
  ])("refuses %s with %s", (name, data, problem) => {
    const shape = new StreamShape();
    shape.check("message_start", event("message_start"));
    expect(firstProblem(shape, [[name, data]])).toBe(problem);
  });

  it("refuses content before message_start, a second message_start, and content after the final delta", () => {
    expect(firstProblem(new StreamShape(), [["content_block_delta", event("content_block_delta")]])).toBe(
      "content_block_delta before message_start",
    );
    const start: [string, string] = ["message_start", event("message_start")];
    expect(firstProblem(new StreamShape(), [start, start])).toBe("a second message_start");
    expect(
      firstProblem(new StreamShape(), [
        start,
        ["message_delta", FINAL],
        ["content_block_delta", event("content_block_delta")],
      ]),
    ).toBe("content_block_delta after the final message_delta");
  });
});
