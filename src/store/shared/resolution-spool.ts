import {
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  writeSync,
} from "node:fs";
import { type FileHandle, open } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { crc32 } from "node:zlib";
import type { ResolutionStatus, UsageCounts } from "../../core/ports/ledger.js";

/** A settle or a void (release, expiry) of one hold, as the ledger port is asked for it. */
export type Resolution =
  | {
      readonly kind: "settle";
      readonly holdId: string;
      readonly charge: bigint;
      readonly usage: UsageCounts;
      readonly now: number;
      readonly charges: string;
    }
  | {
      readonly kind: "void";
      readonly holdId: string;
      readonly status: Exclude<ResolutionStatus, "settled">;
      readonly now: number;
    };

/** The spool's directory under the data dir; one file (and one lock) per host name in it. */
export const SPOOL_DIR = "resolution-spool";

/**
 * The spool file's size, written with zeros when it is made: a record is written in place, so it
 * needs no new block even when the disk is full. About 6,000 settles of a typical charge breakdown.
 */
export const SPOOL_BYTES = 4 << 20;

/** The largest record (a settle whose charge breakdown is unusually long is refused beyond it). */
const MAX_RECORD = 64 << 10;
/** Each record is a header (payload length, CRC-32 of the payload) and its payload, 8-byte aligned. */
const HEADER = 8;
const ALIGN = 8;

/** A spool file that is not a torn last record but damage: start refuses it (docs/store.md). */
export class SpoolCorrupted extends Error {
  override readonly name = "SpoolCorrupted";
}

/**
 * A durable local spool of the resolutions the store refused: a preallocated file in the data
 * dir, one per host, locked by the process that uses it (docs/store.md,
 * "When the store refuses a settlement"). {@link append} returns once the record is on disk (fdatasync); the
 * records read at open are the ones a previous process left; {@link clearIfEmpty} zeroes the
 * file once every kept resolution has been written.
 *
 * The file: records from offset 0, each `[u32 length][u32 crc32][payload JSON][zero padding]`, then
 * zeros to the end. A zero length ends the records. A record whose checksum fails is a torn last
 * write (the process died in its fdatasync; nobody was told it was kept) when only zeros follow
 * it; anything else is damage, and {@link openResolutionSpool} refuses to start on it.
 */
export class ResolutionSpool {
  #file: FileHandle;
  #end: number;
  #chain: Promise<unknown> = Promise.resolve();
  readonly #unlock: () => void;

  /**
   * The resolutions a previous process spooled, oldest first (a hold's last one wins): this
   * slot's, then those adopted from the slots of processes that are gone.
   */
  get found(): readonly Resolution[] {
    return this.#found;
  }
  readonly #found: Resolution[];
  /** Whether the last record found was torn (ignored). */
  readonly torn: boolean;
  readonly path: string;

  private constructor(
    path: string,
    file: FileHandle,
    end: number,
    found: Resolution[],
    torn: boolean,
    unlock: () => void,
  ) {
    this.path = path;
    this.#file = file;
    this.#end = end;
    this.#found = found;
    this.torn = torn;
    this.#unlock = unlock;
  }

  /** Opens the spool at `path` (made and preallocated if missing), under `lock`. */
  static async open(path: string, unlock: () => void, bytes = SPOOL_BYTES): Promise<ResolutionSpool> {
    preallocate(path, bytes);
    const content = readFileSync(path);
    const { found, end, torn } = readRecords(content);
    const file = await open(path, "r+");
    try {
      // Whatever follows the last record (a torn record, a compaction cut short) becomes zeros, so
      // that only a torn write can ever be followed by zeros alone.
      const dirty = lastNonZero(content, end);
      if (dirty > end) {
        await file.write(Buffer.alloc(dirty - end), 0, dirty - end, end);
        await file.datasync();
      }
    } catch (error) {
      await file.close();
      throw error;
    }
    return new ResolutionSpool(path, file, end, found, torn, unlock);
  }

  /**
   * Takes over the records of `other`, the spool of a process that is gone: each is appended
   * here (on disk before `other` is cleared, so a crash in between replays it twice, which the
   * ledger makes harmless, and never loses it), then `other` is zeroed and closed.
   */
  async adopt(other: ResolutionSpool): Promise<void> {
    try {
      for (const resolution of other.found) {
        await this.append(resolution);
        this.#found.push(resolution);
      }
      await other.clearIfEmpty(() => true);
    } finally {
      await other.close();
    }
  }

  /** How many bytes the records take (0: empty). */
  get used(): number {
    return this.#end;
  }

  /** Writes `resolution` after the others and waits for it to be on disk. */
  append(resolution: Resolution): Promise<void> {
    return this.#serial(async () => {
      const record = encodeRecord(resolution);
      const size = (await this.#file.stat()).size;
      if (this.#end + record.length + HEADER > size)
        throw new Error(`the resolution spool ${this.path} is full (${size} bytes)`);
      await this.#file.write(record, 0, record.length, this.#end);
      await this.#file.datasync();
      this.#end += record.length;
    });
  }

  /**
   * Zeroes the records when `empty()` says nothing is kept any more (asked in turn with the
   * appends, so a record appended meanwhile is never lost): the first header first, so that a
   * crash between the two writes leaves an empty spool rather than a damaged one.
   */
  clearIfEmpty(empty: () => boolean): Promise<void> {
    return this.#serial(async () => {
      if (this.#end === 0 || !empty()) return;
      await this.#file.write(Buffer.alloc(HEADER), 0, HEADER, 0);
      await this.#file.datasync();
      await this.#file.write(Buffer.alloc(this.#end), 0, this.#end, 0);
      await this.#file.datasync();
      this.#end = 0;
    });
  }

  /** Closes the file and releases the lock (the records stay for the next start). */
  async close(): Promise<void> {
    await this.#serial(() => this.#file.close());
    this.#unlock();
  }

  #serial<T>(work: () => Promise<T>): Promise<T> {
    const run = this.#chain.then(work, work);
    this.#chain = run.catch(() => undefined);
    return run;
  }
}

/** Most gateway processes one host may run on one data dir (each holds a slot of the spool). */
const SLOTS = 16;

/**
 * Opens this process's spool in `dataDir`: the first free slot of this host
 * (`resolution-spool/<host name>.spool`, then `<host name>-1.spool`, …), holding its lock (`.lock`
 * beside it, an exclusive SQLite lock the kernel drops with the process, however it dies). Several
 * processes on one data dir (hosts on one SQLite file) each take a slot; the records of a slot
 * whose process is gone (its lock free) are adopted by the process that opens it, or, when that
 * process has a lower slot, moved into its own. More than {@link SLOTS} processes are refused.
 */
export async function openResolutionSpool(dataDir: string, bytes = SPOOL_BYTES): Promise<ResolutionSpool> {
  const dir = join(dataDir, SPOOL_DIR);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const host = hostname().replace(/[^A-Za-z0-9._-]/g, "_");
  let own: ResolutionSpool | undefined;
  try {
    for (let slot = 0; slot < SLOTS; slot++) {
      const base = join(dir, slot === 0 ? host : `${host}-${slot}`);
      // Past this process's own slot, only slots a process left behind matter.
      if (own !== undefined && !existsSync(`${base}.spool`)) continue;
      const unlock = await tryLock(`${base}.lock`);
      if (unlock === undefined) continue;
      let spool: ResolutionSpool;
      try {
        spool = await ResolutionSpool.open(`${base}.spool`, unlock, bytes);
      } catch (error) {
        unlock();
        throw error;
      }
      if (own === undefined) own = spool;
      else await own.adopt(spool);
    }
  } catch (error) {
    await own?.close();
    throw error;
  }
  if (own === undefined)
    throw new Error(
      `every resolution spool slot in ${dir} is held by another gateway process (${SLOTS} at most per data dir and host): give this one its own TOLLGATE_DATA_DIR`,
    );
  return own;
}

/**
 * Takes the exclusive lock of the SQLite file at `path`, or answers undefined when another process
 * holds it: better-sqlite3's (POSIX) file locks are
 * the process's own, released by the kernel when it exits or is killed, so a crash never leaves a
 * stale lock behind.
 */
async function tryLock(path: string): Promise<(() => void) | undefined> {
  const { default: Database } = await import("better-sqlite3");
  const db = new Database(path, { timeout: 0 });
  try {
    // A database that has a page: locking an empty file would write its header, which a full
    // disk refuses; made at the first start, the page is there on every later one.
    if (db.pragma("user_version", { simple: true }) === 0) db.pragma("user_version = 1");
    db.pragma("locking_mode = EXCLUSIVE");
    db.exec("BEGIN EXCLUSIVE");
  } catch (error) {
    db.close();
    if ((error as { code?: unknown }).code === "SQLITE_BUSY") return undefined;
    throw error;
  }
  return () => {
    if (db.open) db.close();
  };
}

/** Makes `path` a file of `bytes` zeros if it is missing, durably (a temporary file renamed). */
function preallocate(path: string, bytes: number): void {
  try {
    if (statSync(path).size >= bytes) return;
    throw new SpoolCorrupted(`the resolution spool ${path} is shorter than ${bytes} bytes`);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  const temporary = `${path}.new`;
  const fd = openSync(temporary, "w", 0o600);
  try {
    const zeros = Buffer.alloc(Math.min(bytes, 1 << 20));
    for (let at = 0; at < bytes; at += zeros.length) {
      writeSync(fd, zeros, 0, Math.min(zeros.length, bytes - at), at);
    }
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temporary, path);
  const dir = openSync(join(path, ".."), "r");
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
}

/** `resolution` as one record: header, JSON payload (amounts as decimal strings), zero padding. */
export function encodeRecord(resolution: Resolution): Buffer {
  const payload = Buffer.from(
    JSON.stringify(
      resolution.kind === "settle"
        ? {
            ...resolution,
            charge: `${resolution.charge}`,
            usage: {
              ...resolution.usage,
              inputTokens: `${resolution.usage.inputTokens}`,
              outputTokens: `${resolution.usage.outputTokens}`,
              cacheWrite5mTokens: `${resolution.usage.cacheWrite5mTokens}`,
              cacheWrite1hTokens: `${resolution.usage.cacheWrite1hTokens}`,
              cacheReadTokens: `${resolution.usage.cacheReadTokens}`,
            },
          }
        : resolution,
    ),
  );
  if (payload.length > MAX_RECORD)
    throw new Error(`a spooled resolution of ${payload.length} bytes is too long`);
  const record = Buffer.alloc(Math.ceil((HEADER + payload.length) / ALIGN) * ALIGN);
  record.writeUInt32LE(payload.length, 0);
  record.writeUInt32LE(crc32(payload), 4);
  payload.copy(record, HEADER);
  return record;
}

/** The records in `content`, where they end, and whether a torn last one was ignored. */
export function readRecords(content: Buffer): { found: Resolution[]; end: number; torn: boolean } {
  const found: Resolution[] = [];
  let at = 0;
  while (at + HEADER <= content.length) {
    const length = content.readUInt32LE(at);
    if (length === 0) return { found, end: at, torn: false };
    const stop = at + HEADER + length;
    const fits = length <= MAX_RECORD && stop <= content.length;
    if (!fits || crc32(content.subarray(at + HEADER, stop)) !== content.readUInt32LE(at + 4)) {
      // Torn: the header reached the disk, not all of the payload, and nothing was written after.
      if (fits && lastNonZero(content, stop) === stop) return { found, end: at, torn: true };
      throw new SpoolCorrupted(
        `the resolution spool is damaged at byte ${at} (a record that is not the last one fails its checksum)`,
      );
    }
    found.push(decode(content.subarray(at + HEADER, stop), at));
    at += Math.ceil((HEADER + length) / ALIGN) * ALIGN;
  }
  return { found, end: at, torn: false };
}

function decode(payload: Buffer, at: number): Resolution {
  const raw = JSON.parse(payload.toString("utf8")) as Record<string, unknown>;
  const holdId = raw.holdId;
  const now = raw.now;
  if (typeof holdId !== "string" || typeof now !== "number")
    throw new SpoolCorrupted(`the resolution spool's record at byte ${at} names no hold`);
  if (raw.kind === "void" && (raw.status === "released" || raw.status === "expired"))
    return { kind: "void", holdId, status: raw.status, now };
  if (raw.kind === "settle" && typeof raw.charges === "string") {
    const u = raw.usage as Record<string, string | number>;
    return {
      kind: "settle",
      holdId,
      charge: BigInt(raw.charge as string),
      usage: {
        inputTokens: BigInt(u.inputTokens!),
        outputTokens: BigInt(u.outputTokens!),
        cacheWrite5mTokens: BigInt(u.cacheWrite5mTokens!),
        cacheWrite1hTokens: BigInt(u.cacheWrite1hTokens!),
        cacheReadTokens: BigInt(u.cacheReadTokens!),
        images: Number(u.images),
        ...(typeof u.endpoint === "string" ? { endpoint: u.endpoint } : {}),
      },
      now,
      charges: raw.charges,
    };
  }
  throw new SpoolCorrupted(`the resolution spool's record at byte ${at} is neither a settle nor a void`);
}

/** The offset just past the last non-zero byte of `content` at or after `from` (`from` if none). */
function lastNonZero(content: Buffer, from: number): number {
  for (let at = content.length; at > from; at--) if (content[at - 1] !== 0) return at;
  return from;
}
