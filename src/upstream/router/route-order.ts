/**
 * The order in which a call tries a model's endpoints (docs/providers.md, "Routes"): by
 * priority, lowest first; within one priority, a weighted random order drawn per call, so
 * that traffic splits by weight while every endpoint of the priority stays a fallback.
 */

/** One endpoint in a model's route. */
export interface RouteEntry {
  /** The endpoint's configured name. */
  readonly endpoint: string;
  /** Lower is tried first; entries without one take their position in the list. */
  readonly priority: number;
  /** The share of calls within its priority (positive). */
  readonly weight: number;
}

/**
 * The entries in the order one call tries them: priorities ascending, each priority's entries
 * in a weighted random order (Efraimidis–Spirakis: sort by u^(1/w) descending).
 */
export function routeOrder(entries: readonly RouteEntry[], random: () => number): RouteEntry[] {
  const keyed = entries.map((entry) => ({ entry, key: random() ** (1 / entry.weight) }));
  keyed.sort((a, b) => a.entry.priority - b.entry.priority || b.key - a.key);
  return keyed.map(({ entry }) => entry);
}
