import type { CallBilling } from "../billing/call-billing.js";
import type { PassBoundary } from "../billing/pass-pricing.js";
import type { TextCallSpec } from "../billing/pricing.js";
import type { HoldRow } from "../ports/ledger.js";
import type { PassRaiser, StreamBoundary } from "./passes.js";

/** What holding a call pass by pass needs. */
export interface PassHoldDeps {
  readonly billing: CallBilling;
  /**
   * The tokens a server tool's result is held for before it arrives (TOLLGATE_TOOL_RESULT_TOKENS):
   * its size is not known when the tool is called. A larger result is topped up when it arrives.
   */
  readonly toolResultTokens: bigint;
}

/**
 * The raises of one call held pass by pass (docs/billing.md, "Holding pass by pass"): before
 * each boundary the stream shows is relayed, the hold `placed` is raised by what the stretch it
 * starts can cost (billing's `nextPassQuoteOn`), so that the charge never exceeds the hold.
 *
 * What the next stretch reads is bounded from the stream: the prompt's bound, `max_tokens` for
 * every stretch so far (thinking the client never sees is context too), and every tool result
 * seen (its UTF-8 bytes bound its tokens). A tool's result is unknown when the tool is called: it
 * is held for {@link PassHoldDeps.toolResultTokens} (a fetch tool's own `max_content_tokens`
 * would be the provider's bound), and a result that arrives larger is topped up before it is
 * relayed. A fallback starts its attempt over from the prompt; a compaction block is no raise
 * point (the stretch that ran it was held for it). Raises are numbered from 2 (the hold itself
 * is pass 1), one per raise, so a retry of the same raise holds nothing more. `onRaised` is
 * told the hold as each raise leaves it: the call settles against that (its charge may reach it).
 */
export function passRaiser(
  deps: PassHoldDeps,
  placed: HoldRow,
  spec: TextCallSpec,
  onRaised: (hold: HoldRow) => void,
): PassRaiser {
  let pass = 1;
  let attempt = 0;
  let stretches = 1n;
  let results = 0n;
  /** Tool calls whose results have not arrived: the context they were held with, and the result size assumed. */
  const awaited: { readonly contextTokens: bigint; readonly attempt: number }[] = [];
  const quote = (boundary: PassBoundary) => deps.billing.nextPassQuote(placed, spec, boundary);
  const raise = async (amount: bigint): Promise<boolean> => {
    if (amount <= 0n) return true;
    pass += 1;
    const raised = await deps.billing.raise(placed, pass, amount);
    if (raised.kind !== "raised") return false;
    onRaised(raised.state.hold);
    return true;
  };
  return async (boundary: StreamBoundary) => {
    switch (boundary.kind) {
      case "compaction":
        return true;
      case "fallback": {
        const attempts = (spec.fallbacks?.length ?? 0) + (spec.defaultFallback === true ? 1 : 0);
        // A fallback the call did not ask for cannot be priced: the turn pauses there.
        if (attempts === 0) return false;
        if (attempt >= attempts) return raise(quote({ kind: "fallback", attempt: attempts }));
        attempt += 1;
        stretches = 1n;
        results = 0n;
        awaited.length = 0;
        return raise(quote({ kind: "fallback", attempt }));
      }
      case "server_tool": {
        const contextTokens = spec.inputTokens + stretches * spec.maxTokens + results;
        stretches += 1n;
        if (boundary.name === "advisor" && spec.advisor !== undefined)
          return raise(quote({ kind: "advisor", attempt, contextTokens }));
        awaited.push({ contextTokens, attempt });
        return raise(quote({ kind: "tool", attempt, contextTokens, resultTokens: deps.toolResultTokens }));
      }
      case "result": {
        const tokens = BigInt(boundary.bytes);
        results += tokens;
        const held = awaited.shift();
        if (held === undefined || tokens <= deps.toolResultTokens) return true;
        const tool = { kind: "tool", attempt: held.attempt, contextTokens: held.contextTokens } as const;
        return raise(
          quote({ ...tool, resultTokens: tokens }) - quote({ ...tool, resultTokens: deps.toolResultTokens }),
        );
      }
    }
  };
}
