import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { AuthThrottle } from "../../src/core/auth/auth-throttle.js";
import { throttleKey } from "../../src/core/auth/client-address.js";
import { KnownCredentials } from "../../src/core/auth/known-credentials.js";
import { errorInfo, keyRevoked, keyUnknown } from "../../src/core/errors.js";
import { memoryRateLimiter } from "../../src/limits/memory.js";

/** A throttle of `perMinute` failures in memory, and a check that counts its runs. */
function throttled(perMinute: number, blockMs = 60_000) {
  const throttle = new AuthThrottle({ rateLimiter: memoryRateLimiter, perMinute, blockMs }, Date.now);
  let runs = 0;
  const fail = (error: ConnectError) => () => {
    runs++;
    return Promise.reject(error);
  };
  const pass = () => {
    runs++;
    return Promise.resolve("ok");
  };
  return { throttle, fail, pass, runs: () => runs };
}

async function reasonOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    return errorInfo(ConnectError.from(error))?.reason;
  }
}

describe("AuthThrottle", () => {
  it("answers `perMinute` failures as they are, then refuses the address without running the check", async () => {
    const t = throttled(3);
    for (let i = 0; i < 3; i++)
      expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown())))).toBe("KEY_UNKNOWN");
    // The failure that goes over the budget is answered as the block it starts.
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown())))).toBe("AUTH_THROTTLED");
    expect(t.runs()).toBe(4);
    // From now on nothing is checked, a valid credential included.
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.pass))).toBe("AUTH_THROTTLED");
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown())))).toBe("AUTH_THROTTLED");
    expect(t.runs()).toBe(4);
    // Another address is untouched.
    expect(await t.throttle.guard("192.0.2.2", t.pass)).toBe("ok");
  });

  it("says when to come back: the block, counted from the failure that went over", async () => {
    const t = throttled(1, 5_000);
    await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown())));
    try {
      await t.throttle.guard("192.0.2.1", t.fail(keyUnknown()));
      expect.unreachable();
    } catch (error) {
      const refusal = ConnectError.from(error);
      expect(refusal.code).toBe(Code.ResourceExhausted);
      expect(errorInfo(refusal)?.metadata.retry_after).toBe("5");
    }
  });

  it("counts only failures: valid calls and real-but-refused keys never block an address", async () => {
    const t = throttled(2);
    for (let i = 0; i < 50; i++) expect(await t.throttle.guard("192.0.2.1", t.pass)).toBe("ok");
    for (let i = 0; i < 10; i++)
      expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyRevoked())))).toBe("KEY_REVOKED");
    expect(await t.throttle.guard("192.0.2.1", t.pass)).toBe("ok");
  });

  it("lets the address in again once its block has passed", async () => {
    const t = throttled(1, 300);
    await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown())));
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown())))).toBe("AUTH_THROTTLED");
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.pass))).toBe("AUTH_THROTTLED");
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(await t.throttle.guard("192.0.2.1", t.pass)).toBe("ok");
  });

  it("throttles nothing without limits or without an address", async () => {
    const off = new AuthThrottle(undefined, Date.now);
    const none = throttled(1);
    for (let i = 0; i < 5; i++) {
      expect(await reasonOf(off.guard("192.0.2.1", () => Promise.reject(keyUnknown())))).toBe("KEY_UNKNOWN");
      expect(await reasonOf(none.throttle.guard(undefined, none.fail(keyUnknown())))).toBe("KEY_UNKNOWN");
    }
  });
});

describe("AuthThrottle and the keys an address used before its block (issue 29)", () => {
  it("lets a credential that passed from the address before its block through; any other is refused unchecked", async () => {
    const t = throttled(2);
    expect(await t.throttle.guard("192.0.2.1", t.pass, "tg_known")).toBe("ok");
    for (let i = 0; i < 3; i++)
      await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown()), `tg_guess${i}`));
    const runs = t.runs();
    // The known credential is checked and served, again and again.
    for (let i = 0; i < 5; i++) expect(await t.throttle.guard("192.0.2.1", t.pass, "tg_known")).toBe("ok");
    expect(t.runs()).toBe(runs + 5);
    // A credential never seen from this address is refused without a check, valid or not.
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.pass, "tg_other"))).toBe("AUTH_THROTTLED");
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown()), "tg_guess9"))).toBe(
      "AUTH_THROTTLED",
    );
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.pass))).toBe("AUTH_THROTTLED");
    expect(t.runs()).toBe(runs + 5);
    // Known from one address is not known from another: a blocked 192.0.2.2 refuses it.
    for (let i = 0; i < 3; i++)
      await reasonOf(t.throttle.guard("192.0.2.2", t.fail(keyUnknown()), `tg_g${i}`));
    expect(await reasonOf(t.throttle.guard("192.0.2.2", t.pass, "tg_known"))).toBe("AUTH_THROTTLED");
  });

  it("learns nothing while the address is blocked: a guess that would pass is never checked, so never known", async () => {
    const t = throttled(1);
    for (let i = 0; i < 2; i++)
      await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown()), `tg_g${i}`));
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.pass, "tg_right"))).toBe("AUTH_THROTTLED");
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.pass, "tg_right"))).toBe("AUTH_THROTTLED");
  });

  it("counts a known credential that now fails (its key deleted) as a failure like any other", async () => {
    const t = throttled(1);
    await t.throttle.guard("192.0.2.1", t.pass, "tg_known");
    await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown()), "tg_g0"));
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown()), "tg_g1"))).toBe(
      "AUTH_THROTTLED",
    );
    expect(await reasonOf(t.throttle.guard("192.0.2.1", t.fail(keyUnknown()), "tg_known"))).toBe(
      "AUTH_THROTTLED",
    );
  });
});

describe("KnownCredentials", () => {
  it("remembers pairs by the throttle's address key, and forgets the least recently used past its bound", () => {
    const known = new KnownCredentials(3);
    known.add("192.0.2.1", "a");
    known.add("2001:db8:1:2::1", "b");
    known.add("192.0.2.1", "c");
    expect(known.has("::ffff:192.0.2.1", "a")).toBe(true);
    expect(known.has("2001:db8:1:2::ffff", "b")).toBe(true);
    expect(known.has("192.0.2.2", "a")).toBe(false);
    known.add("192.0.2.1", "a"); // used again: now the newest
    known.add("192.0.2.1", "d"); // over the bound: "b" (the oldest) goes
    expect(known.size).toBe(3);
    expect(known.has("2001:db8:1:2::1", "b")).toBe(false);
    expect(["a", "c", "d"].every((c) => known.has("192.0.2.1", c))).toBe(true);
  });
});

describe("throttleKey", () => {
  it("counts IPv4 as it is, also mapped into IPv6, and IPv6 by its /64", () => {
    expect(throttleKey("192.0.2.7")).toBe("192.0.2.7");
    expect(throttleKey("::ffff:192.0.2.7")).toBe("192.0.2.7");
    expect(throttleKey("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64");
    expect(throttleKey("2001:DB8:1:2:bbbb:cccc:dddd:eeee")).toBe("2001:db8:1:2::/64");
    expect(throttleKey("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(throttleKey("::1")).toBe("0:0:0:0::/64");
    expect(throttleKey("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
    expect(throttleKey("64:ff9b::192.0.2.7")).toBe("64:ff9b:0:0::/64");
    expect(throttleKey("2001:0db8:0001:0002::")).toBe("2001:db8:1:2::/64");
  });
});
