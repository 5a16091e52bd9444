/**
 * The tokens `url` images are stored and served under, minted here in the core and never by a
 * store (src/core/ports/image-store.ts), so every store gets the same unguessability.
 */
import { randomBytes } from "node:crypto";

/** A URL token: 256 random bits, base64url (43 characters). */
export function newImageToken(): string {
  return randomBytes(32).toString("base64url");
}

/** Whether `token` has the shape {@link newImageToken} gives (checked before any lookup). */
export function isImageToken(token: string): boolean {
  return /^[A-Za-z0-9_-]{43}$/.test(token);
}
