import { describe, expect, it } from "vitest";
import { newId, newRequestId } from "./ids.js";

describe("ids", () => {
  it("request ids are req_ + 24 base64url characters, distinct across pool refills", () => {
    const ids = Array.from({ length: 1_000 }, newRequestId);
    for (const id of ids) expect(id).toMatch(/^req_[A-Za-z0-9_-]{24}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("ids are prefix_ + 20 lowercase base32 characters", () => {
    expect(newId("hold")).toMatch(/^hold_[a-z2-7]{20}$/);
  });
});
