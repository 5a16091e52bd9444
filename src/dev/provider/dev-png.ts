/**
 * Deterministic, clearly labelled PNGs for the dev upstream: a checkerboard in two colours
 * derived from a seed, with a dark band across the middle carrying visible text ("TOLLGATE
 * DEV-UPSTREAM", "GENERATED IMAGE - NOT A MODEL", the size) and `tEXt` chunks saying the same.
 * Encoded with Node's zlib; rows are Up-filtered, so the repeated rows of a 4K image cost
 * almost nothing to compress.
 */
import { crc32, deflateSync } from "node:zlib";

/** What to draw. */
export interface DevPngOptions {
  readonly width: number;
  readonly height: number;
  /** Picks the colours: the same seed always gives the same image. */
  readonly seed: Uint8Array;
  /** Visible lines of text, upper-case (other characters are drawn as blanks). */
  readonly lines: readonly string[];
  /** `tEXt` chunks (keyword → text, Latin-1). */
  readonly text: Readonly<Record<string, string>>;
}

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** A 5×7 bitmap font for the characters the labels use; each string is one row, `#` is ink. */
const FONT: Readonly<Record<string, readonly string[]>> = {
  A: [".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"],
  B: ["####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."],
  C: [".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."],
  D: ["####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."],
  E: ["#####", "#....", "#....", "####.", "#....", "#....", "#####"],
  F: ["#####", "#....", "#....", "####.", "#....", "#....", "#...."],
  G: [".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"],
  H: ["#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"],
  I: [".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."],
  J: ["..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."],
  K: ["#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"],
  L: ["#....", "#....", "#....", "#....", "#....", "#....", "#####"],
  M: ["#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"],
  N: ["#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"],
  O: [".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."],
  P: ["####.", "#...#", "#...#", "####.", "#....", "#....", "#...."],
  Q: [".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"],
  R: ["####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"],
  S: [".####", "#....", "#....", ".###.", "....#", "....#", "####."],
  T: ["#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."],
  U: ["#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."],
  V: ["#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."],
  W: ["#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."],
  X: ["#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"],
  Y: ["#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."],
  Z: ["#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"],
  "0": [".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."],
  "1": ["..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."],
  "2": [".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"],
  "3": ["#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."],
  "4": ["...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."],
  "5": ["#####", "#....", "####.", "....#", "....#", "#...#", ".###."],
  "6": ["..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."],
  "7": ["#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."],
  "8": [".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."],
  "9": [".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."],
  "-": [".....", ".....", ".....", "#####", ".....", ".....", "....."],
  ":": [".....", "..#..", "..#..", ".....", "..#..", "..#..", "....."],
  ".": [".....", ".....", ".....", ".....", ".....", "..#..", "..#.."],
};
const GLYPH_W = 5;
const GLYPH_H = 7;
/** Glyph cell including one column and two rows of spacing. */
const CELL_W = GLYPH_W + 1;
const CELL_H = GLYPH_H + 2;

/** Encodes the labelled image as PNG (8-bit RGB). */
export function labelledPng(options: DevPngOptions): Buffer {
  const { width, height } = options;
  const [light, dark] = palette(options.seed);
  const ink = [255, 255, 255];
  const band = [20, 20, 20];
  const longest = Math.max(1, ...options.lines.map((line) => line.length));
  // Text spans most of the width, never less than one pixel per font dot.
  const scale = Math.max(1, Math.floor((width * 0.85) / (longest * CELL_W)));
  const textHeight = options.lines.length * CELL_H * scale;
  const bandTop = Math.max(0, Math.floor((height - textHeight) / 2) - scale * 2);
  const bandBottom = Math.min(height, bandTop + textHeight + scale * 4);
  const square = Math.max(8, Math.floor(Math.min(width, height) / 8));

  // Rows repeat (two checker phases, one per label dot row): build each distinct row once.
  const rows = new Map<string, Buffer>();
  const rowAt = (y: number): Buffer => {
    const inBand = y >= bandTop && y < bandBottom;
    const textY = y - bandTop - scale * 2;
    const key = inBand ? `band:${Math.floor(textY / scale)}` : `checker:${Math.floor(y / square) % 2}`;
    let row = rows.get(key);
    if (row === undefined) {
      row = Buffer.alloc(width * 3);
      if (inBand) fillBandRow(row, width, textY, options.lines, scale, band, ink);
      else fillCheckerRow(row, width, Math.floor(y / square) % 2, square, light, dark);
      rows.set(key, row);
    }
    return row;
  };
  const stride = width * 3 + 1;
  const raw = Buffer.alloc(stride * height);
  let previous: Buffer | undefined;
  for (let y = 0; y < height; y++) {
    const row = rowAt(y);
    const offset = y * stride;
    if (previous === undefined) {
      raw[offset] = 0; // filter None
      row.copy(raw, offset + 1);
    } else {
      raw[offset] = 2; // filter Up: a row equal to the one above stays all zeros
      if (row !== previous) {
        for (let i = 0; i < row.length; i++)
          raw[offset + 1 + i] = ((row[i] ?? 0) - (previous[i] ?? 0)) & 0xff;
      }
    }
    previous = row;
  }
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // truecolour
  const chunks = [chunk("IHDR", header)];
  for (const [keyword, text] of Object.entries(options.text)) {
    chunks.push(
      chunk(
        "tEXt",
        Buffer.concat([Buffer.from(keyword, "latin1"), Buffer.of(0), Buffer.from(text, "latin1")]),
      ),
    );
  }
  chunks.push(chunk("IDAT", deflateSync(raw)), chunk("IEND", Buffer.alloc(0)));
  return Buffer.concat([SIGNATURE, ...chunks]);
}

/** One row of the checkerboard, in one of its two phases. */
function fillCheckerRow(
  row: Buffer,
  width: number,
  phase: number,
  square: number,
  light: readonly number[],
  dark: readonly number[],
): void {
  for (let x = 0; x < width; x++) row.set((Math.floor(x / square) + phase) % 2 === 0 ? light : dark, x * 3);
}

/** One row of the label band: the dark background with the text's dots in ink. */
function fillBandRow(
  row: Buffer,
  width: number,
  textY: number,
  lines: readonly string[],
  scale: number,
  band: readonly number[],
  ink: readonly number[],
): void {
  for (let x = 0; x < width; x++) row.set(band, x * 3);
  if (textY < 0) return;
  const line = lines[Math.floor(textY / (CELL_H * scale))];
  const glyphRow = Math.floor((textY % (CELL_H * scale)) / scale);
  if (line === undefined || glyphRow >= GLYPH_H) return;
  const left = Math.max(0, Math.floor((width - line.length * CELL_W * scale) / 2));
  for (const [index, char] of [...line].entries()) {
    const bits = FONT[char]?.[glyphRow];
    if (bits === undefined) continue;
    for (let dot = 0; dot < GLYPH_W; dot++) {
      if (bits[dot] !== "#") continue;
      const start = left + (index * CELL_W + dot) * scale;
      for (let x = start; x < Math.min(width, start + scale); x++) row.set(ink, x * 3);
    }
  }
}

/** Two contrasting colours from the seed's first bytes. */
function palette(seed: Uint8Array): [readonly number[], readonly number[]] {
  const byte = (i: number) => seed[i % Math.max(1, seed.length)] ?? 0;
  const light = [160 + (byte(0) % 96), 160 + (byte(1) % 96), 160 + (byte(2) % 96)];
  const dark = [byte(3) % 96, byte(4) % 96, byte(5) % 96];
  return [light, dark];
}

function chunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body) >>> 0);
  return Buffer.concat([length, body, crc]);
}
