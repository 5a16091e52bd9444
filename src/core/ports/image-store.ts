/**
 * The storage port for images returned as `url`: local disk on one host
 * (src/store/shared/image-files.ts), the shared PostgreSQL with several
 * (src/store/postgres/images.ts); object storage could implement the same three calls. Tokens are
 * minted by the core (src/core/images/image-tokens.ts), never by a store, so every store gets
 * the same unguessability.
 */

/** An image kept for a `url` response. */
export interface StoredImage {
  readonly data: Uint8Array;
  readonly mimeType: string;
  /** Unix milliseconds after which it is no longer served. */
  readonly expiresAt: number;
}

/** Where `url` images live until they expire. */
export interface ImageStore {
  /** Stores an image under `token` (from the core's `newImageToken`). */
  put(token: string, image: StoredImage): Promise<void>;
  /** The image under `token` if it exists and has not expired at `now`. */
  get(token: string, now: number): Promise<StoredImage | undefined>;
  /** Removes every image expired at `now`; resolves to how many. */
  sweep(now: number): Promise<number>;
}
