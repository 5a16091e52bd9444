import { expect, it } from "vitest";
import type { SpendCap } from "../../src/core/billing/spend-caps.js";
import { type BillingAnnouncements, BillingCache } from "../../src/store/postgres/billing-cache.js";

/** Announcements as a test drives them: whether they arrive, and one to send. */
function announcements() {
  let listener: (accountId: string | undefined) => void = () => {};
  const state = { listening: true };
  const source: BillingAnnouncements = {
    listening: () => state.listening,
    onBillingChange: (l) => {
      listener = l;
    },
  };
  return { source, state, announce: (accountId: string | undefined) => listener(accountId) };
}

const CAP: SpendCap = { accountId: "acct_a", keyId: "", chain: "base", period: "day", amount: 100n };

it("answers what it kept until that account's change is announced; another account's change leaves it", () => {
  const a = announcements();
  const cache = new BillingCache(a.source);
  expect(cache.billing("acct_a")).toBeUndefined();
  cache.keepBilling("acct_a", cache.mark(), { defaultChain: "base" });
  cache.keepCaps("acct_a", "base", "key_1", cache.mark(), [CAP]);
  expect(cache.billing("acct_a")).toEqual({ defaultChain: "base" });
  expect(cache.caps("acct_a", "base", "key_1")).toEqual([CAP]);
  expect(cache.caps("acct_a", "base", "key_2")).toBeUndefined();
  a.announce("acct_b");
  expect(cache.billing("acct_a")).toEqual({ defaultChain: "base" });
  a.announce("acct_a");
  expect(cache.billing("acct_a")).toBeUndefined();
  expect(cache.caps("acct_a", "base", "key_1")).toBeUndefined();
});

it("keeps nothing read across an announcement, and answers nothing while announcements do not arrive", () => {
  const a = announcements();
  const cache = new BillingCache(a.source);
  const mark = cache.mark();
  a.announce("acct_a"); // while the read was in flight
  cache.keepCaps("acct_a", "base", "", mark, []);
  expect(cache.caps("acct_a", "base", "")).toBeUndefined();

  cache.keepCaps("acct_a", "base", "", cache.mark(), []);
  expect(cache.caps("acct_a", "base", "")).toEqual([]);
  a.state.listening = false;
  expect(cache.caps("acct_a", "base", "")).toBeUndefined();
  cache.keepBilling("acct_a", cache.mark(), { defaultChain: undefined });
  a.state.listening = true;
  expect(cache.billing("acct_a")).toBeUndefined();
  // The listener lost or made: every account forgotten.
  a.announce(undefined);
  expect(cache.caps("acct_a", "base", "")).toBeUndefined();
});
