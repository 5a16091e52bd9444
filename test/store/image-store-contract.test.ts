import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newImageToken } from "../../src/core/images/image-tokens.js";
import type { ImageStore } from "../../src/core/ports/image-store.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import {
  IMAGE_POOL_SIZE,
  IMAGE_SWEEP_SQL,
  openImagePool,
  PgImageStore,
} from "../../src/store/postgres/images.js";
import { LocalImageFiles } from "../../src/store/shared/image-files.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { tempDir } from "../helpers/process.js";

// The `url` image port, one suite against the local files (one host on SQLite) and a real
// PostgreSQL (several hosts): an image is served whole under its token until it expires, by
// every handle on the store, and the sweep removes exactly the expired ones.

interface Opened {
  /** Two handles on the one store: two hosts on PostgreSQL; on local files, the same directory twice. */
  readonly handles: readonly [ImageStore, ImageStore];
  /** PostgreSQL only: runs SQL on the shared database. */
  readonly sql?: (text: string, values?: unknown[]) => Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}

let server: PostgresServer;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(async () => {
  await server?.stop();
});

const stores: Record<string, () => Promise<Opened>> = {
  files: async () => {
    const dir = tempDir();
    return {
      handles: [new LocalImageFiles(dir.path), new LocalImageFiles(dir.path)],
      close: async () => dir.cleanup(),
    };
  },
  postgres: async () => {
    const url = await server.freshDatabase();
    // The store's main pool migrates; each "host" reads and writes images on a pool of its own,
    // as openPgStores wires them.
    const main = await openPostgres(url, 2);
    const pools = [openImagePool(url), openImagePool(url)] as const;
    return {
      handles: [new PgImageStore(pools[0]), new PgImageStore(pools[1])],
      sql: async (text, values) => (await main.query(text, values)).rows,
      close: async () => {
        for (const pool of [...pools, main]) await pool.end();
      },
    };
  },
};

function image(data: Uint8Array, expiresAt: number, mimeType = "image/png") {
  return { data, mimeType, expiresAt };
}

for (const [name, open] of Object.entries(stores)) {
  describe(`the image store on ${name}`, () => {
    async function withStore(body: (s: Opened) => Promise<void>) {
      const s = await open();
      try {
        await body(s);
      } finally {
        await s.close();
      }
    }

    it("serves an image whole, with its type, to every handle until it expires", () =>
      withStore(async ({ handles: [a, b] }) => {
        // Several MiB of bytes that are not text: every byte value, in random order.
        const data = randomBytes(5 * 1024 * 1024 + 7);
        const token = newImageToken();
        await a.put(token, image(data, 10_000, "image/webp"));
        for (const handle of [a, b]) {
          const got = await handle.get(token, 9_999);
          expect(got?.mimeType).toBe("image/webp");
          expect(got?.expiresAt).toBe(10_000);
          expect(Buffer.from(got!.data).equals(data)).toBe(true);
        }
        // Expired: from the first millisecond of its expiry, on every handle.
        expect(await a.get(token, 10_000)).toBeUndefined();
        expect(await b.get(token, 10_001)).toBeUndefined();
      }));

    it("knows nothing under another token: guessed, altered by one character, or empty", () =>
      withStore(async ({ handles: [a, b] }) => {
        const token = newImageToken();
        await a.put(token, image(Buffer.from("png"), 10_000));
        const altered = `${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`;
        for (const other of [newImageToken(), altered, "", token.toUpperCase()]) {
          if (other === token) continue;
          expect(await b.get(other, 1)).toBeUndefined();
        }
        expect((await b.get(token, 1))?.data).toEqual(Buffer.from("png"));
      }));

    it("sweeps exactly the expired images, from any handle, and counts them", () =>
      withStore(async ({ handles: [a, b] }) => {
        const now = Date.now();
        const expired = [newImageToken(), newImageToken(), newImageToken()];
        const live = newImageToken();
        for (const [i, token] of expired.entries()) await a.put(token, image(Buffer.from([i]), now - i));
        await a.put(live, image(Buffer.from("live"), now + 60_000));
        expect(await b.sweep(now)).toBe(3);
        expect(await a.sweep(now)).toBe(0);
        expect((await a.get(live, now))?.data).toEqual(Buffer.from("live"));
        for (const token of expired) expect(await b.get(token, now - 10)).toBeUndefined();
      }));
  });
}

describe("the image store on postgres, in its table", () => {
  it("keeps no token in the clear, and sweeps more than one batch", async () => {
    const s = await stores.postgres!();
    try {
      const [a, b] = s.handles;
      const token = newImageToken();
      await a.put(token, image(Buffer.from("kept"), 5_000));
      const rows = await s.sql!("SELECT encode(token_digest, 'hex') AS digest, mime_type FROM stored_images");
      expect(rows).toHaveLength(1);
      expect(rows[0]!.digest).not.toContain(Buffer.from(token).toString("hex"));
      expect(rows[0]!.digest).toHaveLength(64);

      // 1,200 expired rows: the sweep deletes in batches until none is left.
      await s.sql!(
        `INSERT INTO stored_images (token_digest, mime_type, expires_at, data)
         SELECT sha256(i::text::bytea), 'image/png', 1000 + i, '\\x00'::bytea FROM generate_series(1, 1200) AS i`,
      );
      expect(await b.sweep(4_000)).toBe(1_200);
      expect(await s.sql!("SELECT count(*)::int AS n FROM stored_images")).toEqual([{ n: 1 }]);
      expect((await b.get(token, 4_000))?.data).toEqual(Buffer.from("kept"));
    } finally {
      await s.close();
    }
  });

  it("sweeps by the expiry index and the primary key, never scanning the table or reading bytes", async () => {
    const s = await stores.postgres!();
    try {
      // Many live images, a few expired: what a sweep meets every minute.
      await s.sql!(
        `INSERT INTO stored_images (token_digest, mime_type, expires_at, data)
         SELECT sha256(i::text::bytea), 'image/png', CASE WHEN i <= 10 THEN 5 ELSE 9000000000000 END,
                '\\x00'::bytea FROM generate_series(1, 20000) AS i`,
      );
      await s.sql!("ANALYZE stored_images");
      const plan = JSON.stringify(await s.sql!(`EXPLAIN (FORMAT JSON) ${IMAGE_SWEEP_SQL}`, [10]));
      expect(plan).toContain("stored_images_expiry");
      expect(plan).toContain("stored_images_pkey");
      expect(plan).not.toContain("Seq Scan");
      expect(await s.handles[0].sweep(10)).toBe(10);
    } finally {
      await s.close();
    }
  });

  it("reads and writes on a pool of its own, never more than IMAGE_POOL_SIZE connections however many calls", async () => {
    const s = await stores.postgres!();
    try {
      const [a] = s.handles;
      const data = randomBytes(1024 * 1024);
      const tokens = Array.from({ length: 12 }, () => newImageToken());
      await Promise.all(tokens.map((token) => a.put(token, image(data, 9_000_000_000_000))));
      const got = await Promise.all(tokens.map((token) => a.get(token, 1)));
      expect(got.every((g) => g !== undefined && Buffer.from(g.data).equals(data))).toBe(true);
      const [row] = await s.sql!(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'tollgate images' AND datname = current_database()",
      );
      // Twelve calls at once on one handle: they took turns on its pool's connections (the other
      // handle's pool never connected; the main pool's connections carry no such name).
      expect(row!.n).toBe(IMAGE_POOL_SIZE);
    } finally {
      await s.close();
    }
  });
});
