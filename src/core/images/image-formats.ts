/** Image types the gateway accepts and returns, recognised by their first bytes (never by name). */
export type ImageMimeType = "image/png" | "image/jpeg" | "image/webp";

/** How many leading bytes {@link sniffImageType} needs. */
export const SNIFF_BYTES = 12;

const PNG = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const JPEG = [0xff, 0xd8, 0xff];
const RIFF = [0x52, 0x49, 0x46, 0x46];
const WEBP = [0x57, 0x45, 0x42, 0x50];

/** The image type of `data` by its signature, or undefined when it is none of PNG, JPEG, WebP. */
export function sniffImageType(data: Uint8Array): ImageMimeType | undefined {
  if (startsWith(data, PNG, 0)) return "image/png";
  if (startsWith(data, JPEG, 0)) return "image/jpeg";
  // RIFF <size> WEBP
  if (startsWith(data, RIFF, 0) && startsWith(data, WEBP, 8)) return "image/webp";
  return undefined;
}

function startsWith(data: Uint8Array, signature: readonly number[], offset: number): boolean {
  if (data.byteLength < offset + signature.length) return false;
  return signature.every((byte, i) => data[offset + i] === byte);
}
