import { createHash, randomBytes } from "node:crypto";
import { crc32 } from "node:zlib";

/**
 * API key format: `tg_` + 43 base62 characters (256 random bits) + 6 base62 characters of the
 * CRC-32 of everything before them. The prefix makes a leaked key recognisable to secret
 * scanners; the checksum makes a mistyped key fail before any database lookup.
 */
export const KEY_PREFIX = "tg_";
const BODY_LENGTH = 43;
const CHECKSUM_LENGTH = 6;
const KEY_PATTERN = new RegExp(`^${KEY_PREFIX}[0-9A-Za-z]{${BODY_LENGTH + CHECKSUM_LENGTH}}$`);
/** How many characters of a key are kept and shown to recognise it. */
const DISPLAY_PREFIX_LENGTH = KEY_PREFIX.length + 8;

const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

function base62(value: bigint, width: number): string {
  let out = "";
  let rest = value;
  while (rest > 0n) {
    out = ALPHABET[Number(rest % 62n)] + out;
    rest /= 62n;
  }
  return out.padStart(width, "0");
}

function checksum(head: string): string {
  return base62(BigInt(crc32(head)), CHECKSUM_LENGTH);
}

/** A freshly generated key and what may be stored about it. */
export interface NewKey {
  readonly secret: string;
  readonly digest: Buffer;
  readonly prefix: string;
}

/** Generates a new key from 256 bits of CSPRNG output. */
export function generateKey(): NewKey {
  const head = KEY_PREFIX + base62(BigInt(`0x${randomBytes(32).toString("hex")}`), BODY_LENGTH);
  const secret = head + checksum(head);
  return { secret, digest: digestKey(secret), prefix: displayPrefix(secret) };
}

/** True when `presented` has the key shape and a valid checksum: worth a database lookup. */
export function isWellFormedKey(presented: string): boolean {
  if (!KEY_PATTERN.test(presented)) return false;
  const head = presented.slice(0, -CHECKSUM_LENGTH);
  return checksum(head) === presented.slice(-CHECKSUM_LENGTH);
}

/** SHA-256 of the whole key: the only thing stored. */
export function digestKey(secret: string): Buffer {
  return createHash("sha256").update(secret).digest();
}

/** The part of a key shown in lists, e.g. `tg_4fZq9xYb`. */
export function displayPrefix(secret: string): string {
  return secret.slice(0, DISPLAY_PREFIX_LENGTH);
}
