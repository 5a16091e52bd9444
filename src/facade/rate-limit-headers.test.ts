import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { refusalMetadata } from "../core/ports/rate-limits.js";
import { RateLimitSchema } from "../gen/tollgate/inference/v1/inference_pb.js";
import { limitOfHead, limitOfRefusal, rateLimitHeaders } from "./rate-limit-headers.js";

describe("one rate-limit decision, one conversion to headers", () => {
  const now = Date.parse("2026-01-01T00:00:00.000Z");

  it("a call's head: the limit, what is left and the reset, to the second", () => {
    const head = create(RateLimitSchema, {
      limit: 600n,
      remaining: 12n,
      reset: timestampFromMs(now + 30_500),
    });
    expect(rateLimitHeaders(limitOfHead(head))).toEqual({
      "anthropic-ratelimit-requests-limit": "600",
      "anthropic-ratelimit-requests-remaining": "12",
      "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:30.000Z",
    });
    expect(rateLimitHeaders(limitOfHead(undefined))).toEqual({});
  });

  it("a refusal: retry-after first, from the core's refusal metadata", () => {
    const metadata = {
      ...refusalMetadata({ allowed: false, limit: 600, remaining: 0, resetMs: 1_200 }, now),
      remaining: "0",
    };
    expect(rateLimitHeaders(limitOfRefusal(metadata))).toEqual({
      "retry-after": "2",
      "anthropic-ratelimit-requests-limit": "600",
      "anthropic-ratelimit-requests-remaining": "0",
      "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:01.200Z",
    });
    expect(rateLimitHeaders(limitOfRefusal({}))["retry-after"]).toBe("60");
  });
});
