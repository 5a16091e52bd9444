/** A tiny seeded PRNG (mulberry32) so property tests are reproducible without a dependency. */
export interface Rng {
  /** A uniform integer in [0, max). */
  int(max: number): number;
  /** A uniform bigint in [0, max). */
  big(max: bigint): bigint;
  /** One of the values. */
  pick<T>(values: readonly T[]): T;
}

/** A PRNG seeded with `seed`. */
export function rng(seed: number): Rng {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const self: Rng = {
    int: (max) => Math.floor(next() * max),
    big: (max) => {
      // 4 × 32 bits is ample for the ranges the tests draw from.
      let v = 0n;
      for (let i = 0; i < 4; i++) v = (v << 32n) | BigInt(Math.floor(next() * 4294967296));
      return v % max;
    },
    pick: (values) => values[self.int(values.length)]!,
  };
  return self;
}
