import { inflateSync } from "node:zlib";
import { labelledPng } from "../../src/dev/provider/dev-png.js";

/** A small valid PNG (labelled, deterministic). */
export function smallPng(width = 64, height = 48, seed = "ref"): Buffer {
  return labelledPng({
    width,
    height,
    seed: Buffer.from(seed),
    lines: ["REF"],
    text: { Comment: "test reference" },
  });
}

/** A file that starts like a JPEG (the gateway checks signatures, not whole decodes). */
export function jpegLike(bytes = 256): Buffer {
  const data = Buffer.alloc(bytes, 0x11);
  data.set([0xff, 0xd8, 0xff, 0xe0], 0);
  return data;
}

/** A file that starts like a WebP (RIFF … WEBP). */
export function webpLike(bytes = 256): Buffer {
  const data = Buffer.alloc(bytes, 0x22);
  data.write("RIFF", 0, "latin1");
  data.writeUInt32LE(bytes - 8, 4);
  data.write("WEBPVP8 ", 8, "latin1");
  return data;
}

/** A PNG's width and height from its IHDR chunk. */
export function pngSize(png: Buffer): { width: number; height: number } {
  expect8(png);
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

/** A PNG's tEXt chunks, by keyword. */
export function pngText(png: Buffer): Record<string, string> {
  expect8(png);
  const out: Record<string, string> = {};
  for (let offset = 8; offset < png.length; ) {
    const length = png.readUInt32BE(offset);
    const type = png.toString("latin1", offset + 4, offset + 8);
    const data = png.subarray(offset + 8, offset + 8 + length);
    if (type === "tEXt") {
      const zero = data.indexOf(0);
      out[data.toString("latin1", 0, zero)] = data.toString("latin1", zero + 1);
    }
    offset += 12 + length;
  }
  return out;
}

/** Decodes the image data of an 8-bit RGB PNG with Up/None filters (what the dev upstream writes). */
export function pngPixels(png: Buffer): { width: number; height: number; rgb: Buffer } {
  const { width, height } = pngSize(png);
  const idat: Buffer[] = [];
  for (let offset = 8; offset < png.length; ) {
    const length = png.readUInt32BE(offset);
    if (png.toString("latin1", offset + 4, offset + 8) === "IDAT")
      idat.push(png.subarray(offset + 8, offset + 8 + length));
    offset += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * 3;
  const rgb = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    for (let i = 0; i < stride; i++) {
      const value = raw[y * (stride + 1) + 1 + i] ?? 0;
      const up = y > 0 && filter === 2 ? (rgb[(y - 1) * stride + i] ?? 0) : 0;
      rgb[y * stride + i] = (value + up) & 0xff;
    }
  }
  return { width, height, rgb };
}

function expect8(png: Buffer): void {
  if (!png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) {
    throw new Error("not a PNG");
  }
}
