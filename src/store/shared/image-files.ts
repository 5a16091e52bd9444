/**
 * The default {@link ImageStore}: `url` images as files under the data directory
 * (`<dataDir>/images/`). Each image is two files named by the SHA-256 of its token (so the
 * directory listing does not reveal live URLs): `<digest>.img` with the bytes and
 * `<digest>.json` with its type and expiry, written last, so an image exists only once whole.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ImageStore, StoredImage } from "../../core/ports/image-store.js";

/** Sub-directory of the data directory holding `url` images. */
export const IMAGES_DIR = "images";
/** Leftovers of an interrupted write older than this are removed by the sweep. */
const ORPHAN_AGE_MS = 60 * 60_000;

interface Meta {
  readonly mimeType: string;
  readonly expiresAt: number;
}

/** Images on local disk under `dataDir/images`. */
export class LocalImageFiles implements ImageStore {
  readonly #dir: string;
  #ready: Promise<unknown> | undefined;

  constructor(dataDir: string) {
    this.#dir = join(dataDir, IMAGES_DIR);
  }

  async put(token: string, image: StoredImage): Promise<void> {
    this.#ready ??= mkdir(this.#dir, { recursive: true });
    await this.#ready;
    const base = join(this.#dir, digest(token));
    const meta: Meta = { mimeType: image.mimeType, expiresAt: image.expiresAt };
    await writeAtomically(`${base}.img`, image.data);
    try {
      await writeAtomically(`${base}.json`, JSON.stringify(meta));
    } catch (error) {
      // Bytes without metadata are never served: give their space back now (a full disk).
      await rm(`${base}.img`, { force: true });
      throw error;
    }
  }

  async get(token: string, now: number): Promise<StoredImage | undefined> {
    const base = join(this.#dir, digest(token));
    const meta = await readMeta(`${base}.json`);
    if (meta === undefined) return undefined;
    if (now >= meta.expiresAt) {
      await removeImage(base);
      return undefined;
    }
    try {
      return { data: await readFile(`${base}.img`), mimeType: meta.mimeType, expiresAt: meta.expiresAt };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  async sweep(now: number): Promise<number> {
    let names: string[];
    try {
      names = await readdir(this.#dir);
    } catch (error) {
      if (isNotFound(error)) return 0;
      throw error;
    }
    const live = new Set<string>();
    let removed = 0;
    for (const name of names) {
      if (!name.endsWith(".json")) continue;
      const base = join(this.#dir, name.slice(0, -".json".length));
      const meta = await readMeta(join(this.#dir, name));
      if (meta !== undefined && now < meta.expiresAt) {
        live.add(base);
        continue;
      }
      await removeImage(base);
      removed++;
    }
    // Bytes without metadata (a write cut short), and temporary files, once clearly abandoned.
    for (const name of names) {
      if (name.endsWith(".json")) continue;
      const path = join(this.#dir, name);
      if (name.endsWith(".img") && live.has(path.slice(0, -".img".length))) continue;
      const info = await stat(path).catch(() => undefined);
      if (info !== undefined && now - info.mtimeMs > ORPHAN_AGE_MS) await rm(path, { force: true });
    }
    return removed;
  }
}

function digest(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

/**
 * Writes `path` whole or not at all. A write cut short (ENOSPC: the disk is full) removes its
 * partial file at once rather than leaving the space taken until the sweep; the error, with its
 * code, goes to the caller.
 */
async function writeAtomically(path: string, data: Uint8Array | string): Promise<void> {
  const temp = `${path}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    await writeFile(temp, data);
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}

async function readMeta(path: string): Promise<Meta | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if (isNotFound(error)) return undefined;
    throw error;
  }
  const meta = JSON.parse(text) as Partial<Meta>;
  if (typeof meta.mimeType !== "string" || typeof meta.expiresAt !== "number") return undefined;
  return { mimeType: meta.mimeType, expiresAt: meta.expiresAt };
}

/** Metadata first: once it is gone the image is not served, even if removing the bytes fails. */
async function removeImage(base: string): Promise<void> {
  await rm(`${base}.json`, { force: true });
  await rm(`${base}.img`, { force: true });
}

function isNotFound(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === "ENOENT";
}
