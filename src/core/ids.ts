import { randomBytes } from "node:crypto";

const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

/** A random id: `prefix` + `_` + 20 lowercase base32 characters (100 bits). */
export function newId(prefix: string): string {
  const bytes = randomBytes(20);
  let out = `${prefix}_`;
  for (const byte of bytes) out += BASE32[byte & 31];
  return out;
}

/** A request id: `req_` + 24 base64url characters (144 random bits). */
export function newRequestId(): string {
  return `req_${randomBytes(18).toString("base64url")}`;
}
