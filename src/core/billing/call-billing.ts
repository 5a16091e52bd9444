import type { GroupCommit } from "../../store/group-commit.js";
import type { HoldState } from "../../store/ledger-repository.js";
import type { Billing, HoldInput } from "./billing.js";
import type { ChainConfig } from "./chain-registry.js";
import type { CallSpec, DeliveredUsage, PricedUsage } from "./pricing.js";

/**
 * The billing a model call needs on its hot path: hold before the provider call, settle or
 * release after it. Each answer comes once the write is durable.
 */
export interface CallBilling {
  /** {@link Billing.quote}: the worst case on the chain the call would bill, writing nothing. */
  quote(accountId: string, chain: string | undefined, call: CallSpec): { chain: ChainConfig; amount: bigint };
  /** {@link Billing.holdNewCall}, answered after its commit. */
  holdNewCall(input: HoldInput): Promise<HoldState>;
  /** {@link Billing.settleDelivered}, answered after its commit. */
  settleDelivered(
    holdId: string,
    usage: DeliveredUsage,
  ): Promise<{ state: HoldState; capped: boolean; priced: PricedUsage }>;
  /** {@link Billing.release}, answered after its commit. */
  release(holdId: string): Promise<HoldState>;
}

/**
 * Call billing whose writes share transactions with the other calls in flight (group commit):
 * the same checks and ledger writes as {@link Billing}, one fsync for many calls.
 */
export function groupedCallBilling(billing: Billing, commits: GroupCommit): CallBilling {
  return {
    quote: (accountId, chain, call) => billing.quote(accountId, chain, call),
    holdNewCall: (input) => commits.run(() => billing.holdNewCall(input)),
    settleDelivered: (holdId, usage) => commits.run(() => billing.settleDelivered(holdId, usage)),
    release: (holdId) => commits.run(() => billing.release(holdId)),
  };
}
