import { openServingChains, startDevChainsThread } from "../chains.js";
import { buildCore, serveCore } from "../gateway.js";
import { startDevProviders } from "../providers.js";
import type { Assembly } from "../resources.js";
import { openFacadeOnly, openMetrics } from "../serving.js";

/**
 * `tollgate dev`: like serve, with local stand-ins for what is not configured (dev chains and
 * their faucet on the public dev secret, the dev provider for text and images), metrics on by
 * default, and the chains worker in a thread of this process.
 */
export async function devRecipe(a: Assembly): Promise<void> {
  await openMetrics(a);
  if (a.config.coreUrl !== undefined) return await openFacadeOnly(a, a.config.coreUrl);
  const onchain = await openServingChains(a);
  await startDevProviders(a);
  const built = await buildCore(a, onchain);
  if (onchain !== undefined) await startDevChainsThread(a, onchain, built.chains);
  await serveCore(a, built);
}
