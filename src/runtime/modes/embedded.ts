import { buildCore, serveCore } from "../gateway.js";
import type { Assembly } from "../resources.js";
import { openFacadeOnly, openMetrics } from "../serving.js";

/**
 * An embedded gateway (tests, in-process tools): exactly what the configuration names and nothing
 * else, no stand-in and no chain.
 */
export async function embeddedRecipe(a: Assembly): Promise<void> {
  await openMetrics(a);
  if (a.config.coreUrl !== undefined) return await openFacadeOnly(a, a.config.coreUrl);
  await serveCore(a, await buildCore(a, undefined));
}
