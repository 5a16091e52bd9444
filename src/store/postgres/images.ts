/**
 * `url` images in PostgreSQL (migration 16, table `stored_images`), so that whichever host the
 * balancer picks serves an image another host stored (docs/images.md, "`response_format: url`").
 * Rows are keyed by the SHA-256 of the core's token, as the local files are named
 * (src/store/shared/image-files.ts): the table does not reveal live URLs.
 */
import { createHash } from "node:crypto";
import pg from "pg";
import type { ImageStore, StoredImage } from "../../core/ports/image-store.js";

/** Connections of the image store's own pool, per serving process (see {@link openImagePool}). */
export const IMAGE_POOL_SIZE = 2;

/** Expired rows removed per statement: each sweep transaction stays short however many expired. */
const SWEEP_BATCH = 500;

const PUT_SQL = `
  INSERT INTO stored_images (token_digest, mime_type, expires_at, data) VALUES ($1, $2, $3, $4)
  ON CONFLICT (token_digest) DO UPDATE
    SET mime_type = EXCLUDED.mime_type, expires_at = EXCLUDED.expires_at, data = EXCLUDED.data`;

// The bytes as base64 text: bytea's own text form is hex, twice their size, and a 4 MiB image
// read as hex took twice as long as in base64 (docs/images.md). pg's binary result mode is no way
// out: pg-protocol decodes every column as UTF-8 text first, which corrupts bytes.
const GET_SQL = `
  SELECT mime_type, expires_at, encode(data, 'base64') AS data
    FROM stored_images WHERE token_digest = $1 AND expires_at > $2`;

/**
 * Finds the expired rows by the expiry index, then deletes them by primary key (`= ANY` of an
 * array, so never a scan of the table), bytes never read. SKIP LOCKED: hosts sweeping at the
 * same moment share the work rather than wait on each other's rows. Exported for its plan test.
 */
export const IMAGE_SWEEP_SQL = `
  DELETE FROM stored_images WHERE token_digest = ANY(ARRAY(
    SELECT token_digest FROM stored_images WHERE expires_at <= $1
    LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED))`;

interface ImageRow {
  readonly mime_type: string;
  /** BIGINT: a string on a plain pool, a number on the store's main pool (database.ts). */
  readonly expires_at: string | number;
  /** base64, with PostgreSQL's line breaks (Buffer.from skips them). */
  readonly data: string;
}

/** Images in the shared PostgreSQL database: every gateway host reads what any host wrote. */
export class PgImageStore implements ImageStore {
  constructor(private readonly pool: pg.Pool) {}

  async put(token: string, image: StoredImage): Promise<void> {
    const data = Buffer.from(image.data.buffer, image.data.byteOffset, image.data.byteLength);
    await this.pool.query(PUT_SQL, [digest(token), image.mimeType, image.expiresAt, data]);
  }

  async get(token: string, now: number): Promise<StoredImage | undefined> {
    const { rows } = await this.pool.query<ImageRow>(GET_SQL, [digest(token), now]);
    const row = rows[0];
    return row === undefined
      ? undefined
      : {
          data: Buffer.from(row.data, "base64"),
          mimeType: row.mime_type,
          expiresAt: Number(row.expires_at),
        };
  }

  async sweep(now: number): Promise<number> {
    let removed = 0;
    for (;;) {
      const batch = (await this.pool.query(IMAGE_SWEEP_SQL, [now])).rowCount ?? 0;
      removed += batch;
      if (batch < SWEEP_BATCH) return removed;
    }
  }
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token).digest();
}

/**
 * A small pool of the image store's own on `url` (the schema is the main pool's to migrate). An
 * image read or write holds its connection while a few MiB travel, and the GET needs no key: a
 * burst of them waits here, never for the connections billed calls use.
 */
export function openImagePool(url: string): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: IMAGE_POOL_SIZE,
    application_name: "tollgate images",
  });
  // As the main pool: an idle connection's failure drops it, the next query opens another.
  pool.on("error", () => {});
  return pool;
}
