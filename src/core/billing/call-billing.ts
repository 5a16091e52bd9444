import type { GroupCommit } from "../../store/group-commit.js";
import type { HoldState } from "../../store/ledger-repository.js";
import type { Billing, HoldInput } from "./billing.js";
import type { DeliveredUsage } from "./pricing.js";

/**
 * The billing a model call needs on its hot path: hold before the provider call, settle or
 * release after it. Each answer comes once the write is durable.
 */
export interface CallBilling {
  /** {@link Billing.holdNewCall}, answered after its commit. */
  holdNewCall(input: HoldInput): Promise<HoldState>;
  /** {@link Billing.settleDelivered}, answered after its commit. */
  settleDelivered(holdId: string, usage: DeliveredUsage): Promise<{ state: HoldState; capped: boolean }>;
  /** {@link Billing.release}, answered after its commit. */
  release(holdId: string): Promise<HoldState>;
}

/**
 * Call billing whose writes share transactions with the other calls in flight (group commit):
 * the same checks and ledger writes as {@link Billing}, one fsync for many calls.
 */
export function groupedCallBilling(billing: Billing, commits: GroupCommit): CallBilling {
  return {
    holdNewCall: (input) => commits.run(() => billing.holdNewCall(input)),
    settleDelivered: (holdId, usage) => commits.run(() => billing.settleDelivered(holdId, usage)),
    release: (holdId) => commits.run(() => billing.release(holdId)),
  };
}
