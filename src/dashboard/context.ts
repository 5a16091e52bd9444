import type { GetSessionResponse } from "../gen/tollgate/auth/v1/auth_pb.js";
import type { Chain, GetPricingResponse } from "../gen/tollgate/billing/v1/billing_pb.js";
import { ledgerDecimals } from "./money.js";

/** What every page gets: where to draw, who is signed in, and the public catalog. */
export interface PageContext {
  readonly main: HTMLElement;
  /** Undefined when signed out. */
  readonly session: GetSessionResponse | undefined;
  readonly pricing: GetPricingResponse;
  /** Re-reads the session and redraws the whole dashboard (after sign-in, sign-out, linking). */
  refresh(): Promise<void>;
}

/** A page: draws itself into `ctx.main`, with its own loading and error states. */
export type Page = (ctx: PageContext) => Promise<void>;

/** A chain of the catalog by id. */
export function chainById(ctx: PageContext, id: string): Chain | undefined {
  return ctx.pricing.chains.find((chain) => chain.id === id);
}

/** The decimals of a chain's ledger units (6 for an unknown chain, as every shipped one has). */
export function chainLedgerDecimals(ctx: PageContext, id: string): number {
  return ledgerDecimals(chainById(ctx, id)?.asset?.decimals ?? 6);
}
