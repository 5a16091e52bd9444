import { chainUnknown, defaultChainUnavailable } from "./billing-errors.js";
import { AUTO_CHAIN, type ChainConfig, type ChainRegistry, enabledChainIds } from "./chain-registry.js";

/**
 * The chain a call bills on. `auto`, empty or absent → the account's default (or the
 * registry's, when the account never picked one); a known enabled chain id → exactly that chain,
 * never another; anything else fails InvalidArgument naming the allowed values.
 */
export function selectChain(
  registry: ChainRegistry,
  requested: string | undefined,
  accountDefault: string | undefined,
): ChainConfig {
  // Chain ids are lowercase; accepting "Base" is not a switch to another chain.
  const value = requested?.trim().toLowerCase() ?? "";
  if (value === "" || value === AUTO_CHAIN) {
    const id = accountDefault ?? registry.defaultChain;
    const chain = registry.byId.get(id);
    if (chain === undefined || !chain.enabled) throw defaultChainUnavailable(id);
    return chain;
  }
  const chain = registry.byId.get(value);
  if (chain === undefined || !chain.enabled)
    throw chainUnknown(value, [AUTO_CHAIN, ...enabledChainIds(registry)]);
  return chain;
}

/** An enabled chain named explicitly (no `auto`), e.g. for a new default; `field` names the input. */
export function enabledChain(registry: ChainRegistry, id: string, field: string): ChainConfig {
  const chain = registry.byId.get(id.trim().toLowerCase());
  if (chain === undefined || !chain.enabled) throw chainUnknown(id, enabledChainIds(registry), field);
  return chain;
}

/** A configured chain by id (enabled or not), for reads and operator credits. */
export function configuredChain(registry: ChainRegistry, id: string, field = "chain"): ChainConfig {
  const chain = registry.byId.get(id.trim().toLowerCase());
  if (chain === undefined)
    throw chainUnknown(
      id,
      registry.chains.map((c) => c.id),
      field,
    );
  return chain;
}
