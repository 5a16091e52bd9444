import { openServingChains } from "../chains.js";
import { buildCore, serveCore } from "../gateway.js";
import type { Assembly } from "../resources.js";
import { openFacadeOnly, openMetrics } from "../serving.js";

/**
 * `tollgate serve`, production (it has already refused to start without what production needs):
 * the metrics endpoint, then either a facade-only tier in front of TOLLGATE_CORE_URL, or the
 * whole gateway on the configured provider and the configured chains' RPCs, their watchers and
 * settlement left to `tollgate worker`.
 */
export async function serveRecipe(a: Assembly): Promise<void> {
  await openMetrics(a);
  if (a.config.coreUrl !== undefined) return await openFacadeOnly(a, a.config.coreUrl);
  const onchain = await openServingChains(a);
  await serveCore(a, await buildCore(a, onchain));
}
