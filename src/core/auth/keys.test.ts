import { describe, expect, it } from "vitest";
import { digestKey, generateKey, isWellFormedKey, KEY_PREFIX } from "./keys.js";

describe("API key format", () => {
  it("is the prefix, 43 base62 characters of randomness and a 6-character checksum", () => {
    const { secret, prefix, digest } = generateKey();
    expect(secret).toMatch(/^tg_[0-9A-Za-z]{49}$/);
    expect(secret.startsWith(KEY_PREFIX)).toBe(true);
    expect(prefix).toBe(secret.slice(0, 11));
    expect(digest).toEqual(digestKey(secret));
    expect(digest).toHaveLength(32);
    expect(isWellFormedKey(secret)).toBe(true);
  });

  it("never repeats", () => {
    const secrets = new Set(Array.from({ length: 2_000 }, () => generateKey().secret));
    expect(secrets.size).toBe(2_000);
  });

  it("rejects every single-character typo through the checksum", () => {
    const { secret } = generateKey();
    for (let i = KEY_PREFIX.length; i < secret.length; i++) {
      const swapped = secret[i] === "A" ? "B" : "A";
      expect(isWellFormedKey(secret.slice(0, i) + swapped + secret.slice(i + 1))).toBe(false);
    }
  });

  it("rejects truncation, extension, other prefixes and non-base62 characters", () => {
    const { secret } = generateKey();
    expect(isWellFormedKey(secret.slice(0, -1))).toBe(false);
    expect(isWellFormedKey(`${secret}0`)).toBe(false);
    expect(isWellFormedKey(`sk_${secret.slice(3)}`)).toBe(false);
    expect(isWellFormedKey(`${secret.slice(0, 20)}-${secret.slice(21)}`)).toBe(false);
    expect(isWellFormedKey("")).toBe(false);
  });
});
