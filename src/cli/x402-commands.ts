import type { Command } from "./command.js";
import { option } from "./command.js";

/** `tollgate x402 …`: the operator's commands for keyless x402 payers (docs/x402.md). */
export const x402Commands: Record<string, Command> = {
  /**
   * `x402 clear --payer ADDRESS`: takes a payer's x402 calls again after one of its streams went
   * uncollected (a `failed` payment), once the operator has settled what it owed out of band.
   */
  clear: {
    options: { payer: { type: "string" } },
    positionals: 0,
    database: "writes",
    async run(args, context) {
      const payer = option(args, "payer", true);
      const { cleared } = await context.billing.clearX402Payer({ payer });
      if (context.json) return context.out(JSON.stringify({ payer, cleared }));
      context.out(
        cleared === 0
          ? `${payer} owed nothing: no failed x402 payment to clear`
          : `cleared ${cleared} failed x402 payment${cleared === 1 ? "" : "s"} of ${payer}: its x402 calls are taken again`,
      );
    },
  },
};
