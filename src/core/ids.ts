import { randomBytes } from "node:crypto";

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

/** A random id: `prefix` + `_` + 20 lowercase base32 characters (100 bits). */
export function newId(prefix: string): string {
  const bytes = randomBytes(20);
  let out = `${prefix}_`;
  for (const byte of bytes) out += BASE32[byte & 31];
  return out;
}

/** Random bytes drawn ahead for request ids: one `randomBytes` call per 227 ids, not per call. */
const REQUEST_ID_BYTES = 18;
let idPool = Buffer.alloc(0);
let idPoolOffset = 0;

/**
 * A request id: `req_` + 24 base64url characters (144 random bits). Request ids are labels, not
 * secrets; ids that must stay secret (sessions) come from {@link newId}.
 */
export function newRequestId(): string {
  if (idPoolOffset + REQUEST_ID_BYTES > idPool.length) {
    idPool = randomBytes(REQUEST_ID_BYTES * 227);
    idPoolOffset = 0;
  }
  const start = idPoolOffset;
  idPoolOffset += REQUEST_ID_BYTES;
  return `req_${idPool.subarray(start, idPoolOffset).toString("base64url")}`;
}
