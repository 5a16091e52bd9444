import { createRouterTransport } from "@connectrpc/connect";
import { operatorCallerResolver } from "../../core/caller.js";
import { operatorChains } from "../chains.js";
import { buildCore } from "../gateway.js";
import { remoteCoreTransport } from "../remote-core.js";
import type { Assembly } from "../resources.js";

/**
 * The operator's core (the CLI's commands): the core alone over the local database, called in
 * process as the operator, its ledger committing on this thread; no facade, no listener, no
 * provider. With TOLLGATE_CORE_URL, the remote core over gRPC with the operator token instead.
 */
export async function operatorRecipe(a: Assembly): Promise<void> {
  if (a.config.coreUrl !== undefined) {
    a.parts.transport = remoteCoreTransport(a.config.coreUrl, a.config.adminToken);
    return;
  }
  const { core } = await buildCore(a, await operatorChains(a));
  a.parts.transport = createRouterTransport(core.routes, {
    router: core.routerOptionsFor(operatorCallerResolver),
  });
}
