/**
 * The PostgreSQL `url` image store alone (src/store/postgres/images.ts): put and get of images of
 * a few sizes on the store's own image pool, then a sweep of many expired rows and one with
 * nothing due, against a real PostgreSQL the script starts (Debian's, fsync on) and stops.
 * Prints one JSON line; docs/images.md quotes it.
 *
 *   npx tsc -p tsconfig.bench.json && node dist/bench/pg-images.js
 *
 * Options: --sizes MiB,MiB,… (default 1,4,16), --rounds N (15), --expired N (10000).
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { newImageToken } from "../src/core/images/image-tokens.js";
import { openPostgres } from "../src/store/postgres/database.js";
import { openImagePool, PgImageStore } from "../src/store/postgres/images.js";
import { startPostgres } from "../test/helpers/postgres.js";

const { values } = parseArgs({
  options: {
    sizes: { type: "string", default: "1,4,16" },
    rounds: { type: "string", default: "15" },
    expired: { type: "string", default: "10000" },
  },
});
const sizes = values.sizes.split(",").map(Number);
const rounds = Number(values.rounds);
const expired = Number(values.expired);

function median(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return Number(sorted[Math.floor(sorted.length / 2)]!.toFixed(1));
}

const server = await startPostgres();
try {
  const url = await server.freshDatabase();
  const main = await openPostgres(url, 2);
  const pool = openImagePool(url);
  const store = new PgImageStore(pool);
  const result: Record<string, unknown> = { rounds };
  for (const mib of sizes) {
    const data = randomBytes(mib * 1024 * 1024);
    const puts: number[] = [];
    const gets: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const token = newImageToken();
      let t = performance.now();
      await store.put(token, { data, mimeType: "image/png", expiresAt: Date.now() + 60_000 });
      puts.push(performance.now() - t);
      t = performance.now();
      const got = await store.get(token, Date.now());
      gets.push(performance.now() - t);
      if (got === undefined || !Buffer.from(got.data).equals(data))
        throw new Error("the image came back changed");
    }
    result[`${mib}MiB`] = { putMedianMs: median(puts), getMedianMs: median(gets) };
  }
  // Every image above expires, with `expired` small rows beside them.
  await main.query(
    `INSERT INTO stored_images (token_digest, mime_type, expires_at, data)
     SELECT sha256(i::text::bytea), 'image/png', 1, '\\x00'::bytea FROM generate_series(1, $1::int) AS i`,
    [expired],
  );
  await main.query("UPDATE stored_images SET expires_at = 2 WHERE expires_at > 2");
  await main.query("ANALYZE stored_images");
  let t = performance.now();
  const swept = await store.sweep(1_000);
  result.sweep = { rows: swept, ms: Math.round(performance.now() - t) };
  t = performance.now();
  for (let i = 0; i < 100; i++) await store.sweep(1_000);
  result.sweepNothingDueMs = Number(((performance.now() - t) / 100).toFixed(2));
  console.log(JSON.stringify(result));
  await pool.end();
  await main.end();
} finally {
  await server.stop();
}
