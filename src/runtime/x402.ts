import type { FastifyInstance } from "fastify";
import type { ChainsRuntime } from "../chains/chains-runtime.js";
import type { X402Payments } from "../core/billing/x402.js";
import type { X402SignIn } from "../core/billing/x402-sign-in.js";
import type { Stores } from "../store/shared/store-set.js";
import type { OnchainSetup } from "./chains.js";
import type { Assembly } from "./resources.js";

/** x402's side of a gateway: keyless calls paid per request, and the payers' sign-in for receipts. */
export interface X402Parts {
  readonly payments: X402Payments | undefined;
  readonly signIn: X402SignIn | undefined;
}

/**
 * x402 payments (docs/x402.md) on the chains that run, when TOLLGATE_X402 is on, and the payers'
 * sign-in with x402's sign-in-with-x for keyless receipts (docs/receipts.md). Neither without
 * running chains.
 */
export async function openX402Parts(
  a: Assembly,
  onchain: OnchainSetup | undefined,
  chains: ChainsRuntime | undefined,
  stores: Stores,
): Promise<X402Parts> {
  if (onchain === undefined || chains === undefined || !a.config.onchain.x402) {
    return { payments: undefined, signIn: undefined };
  }
  const payments = await openX402(a, onchain, stores);
  if (payments === undefined) return { payments, signIn: undefined };
  // Deferred before the facade: run after it drained, so every collection it started ends.
  a.stack.defer(() => payments.drain());
  return { payments, signIn: await openX402SignIn(a, stores) };
}

/**
 * x402 payments over the local facilitator (or TOLLGATE_X402_FACILITATOR_URL's), on every chain
 * that runs; undefined when none does. On dev chains the facilitator's signers get gas and fees.
 */
async function openX402(
  a: Assembly,
  onchain: OnchainSetup,
  stores: Stores,
): Promise<X402Payments | undefined> {
  const { config, log } = a;
  const devChains = a.parts.dev.chains;
  const { setUpX402 } = await import("../chains/x402/facilitator.js");
  const { X402Payments } = await import("../core/billing/x402.js");
  const setup = await setUpX402(config.chains, onchain.masterSecret, {
    only: onchain.only,
    facilitatorUrl: config.onchain.x402FacilitatorUrl,
    openTokenAccount:
      devChains === undefined ? undefined : (chain, owner) => devChains.openTokenAccount(chain, owner),
    log,
  });
  if (setup.chains.length === 0) return undefined;
  // Dev chains: the facilitator's signers get gas (EVM) and fees (Solana).
  if (devChains !== undefined) {
    for (const [chain, signer] of setup.signers) await devChains.fundFees(chain, signer);
  }
  return await X402Payments.create({
    store: stores.ledger,
    ledger: stores.ledger,
    maxCallMs: config.maxCallMs,
    accounts: stores.accounts,
    registry: config.chains,
    gateway: setup.gateway,
    onchain: setup.onchain,
    chains: setup.chains,
    // A payment must outlive the longest call, with room to collect after it.
    maxTimeoutSeconds: Math.ceil(config.maxCallMs / 1000) + 300,
    publicOrigin: config.publicUrl,
    maxAuthorisation: config.onchain.x402MaxAuthorisation,
    metrics: a.parts.metrics?.registry,
    now: a.now ?? Date.now,
    log,
  });
}

/**
 * Wallet sign-in for keyless payers' receipts, bound to TOLLGATE_PUBLIC_URL, else under
 * `tollgate dev` to the facade's own listen origin (asked once it listens); never to a request's
 * Host. Under `serve` without TOLLGATE_PUBLIC_URL there is no origin: keyless receipts answer
 * 503 naming the variable (fail closed), and keyed ones are unaffected.
 */
async function openX402SignIn(a: Assembly, stores: Stores): Promise<X402SignIn> {
  const { config, mode, parts } = a;
  const { X402SignIn } = await import("../core/billing/x402-sign-in.js");
  const { createSignInWithX } = await import("../chains/x402/sign-in-with-x.js");
  const configured = config.publicUrl;
  return new X402SignIn({
    nonces: stores.sessions,
    origin: () => configured ?? (mode === "dev" ? listenOrigin(parts.facade) : undefined),
    chains: config.chains.chains.filter((c) => c.enabled),
    proofs: createSignInWithX(),
    now: a.now ?? Date.now,
  });
}

/** The origin a listening facade answers at (`http://127.0.0.1:8787`); undefined before it listens. */
function listenOrigin(facade: FastifyInstance | undefined): string | undefined {
  const address = facade?.server.address();
  if (address === null || address === undefined || typeof address === "string") return undefined;
  // A wildcard listener is reached through loopback on the machine `tollgate dev` runs on.
  const host =
    address.address === "0.0.0.0" ? "127.0.0.1" : address.address === "::" ? "::1" : address.address;
  return `http://${host.includes(":") ? `[${host}]` : host}:${address.port}`;
}
