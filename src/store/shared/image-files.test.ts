import { mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { newImageToken } from "../../core/images/image-tokens.js";
import { IMAGES_DIR, LocalImageFiles } from "./image-files.js";

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function store() {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-images-"));
  dirs.push(dir);
  return { files: new LocalImageFiles(dir), dir: join(dir, IMAGES_DIR) };
}

describe("LocalImageFiles", () => {
  it("serves an image under its token until it expires, then forgets it", async () => {
    const { files, dir } = store();
    const token = newImageToken();
    await files.put(token, { data: Buffer.from("png bytes"), mimeType: "image/png", expiresAt: 2_000 });
    expect(await files.get(token, 1_999)).toEqual({
      data: Buffer.from("png bytes"),
      mimeType: "image/png",
      expiresAt: 2_000,
    });
    expect(await files.get(newImageToken(), 1_000)).toBeUndefined();
    // File names are digests: the listing does not reveal the token.
    expect(readdirSync(dir).some((name) => name.includes(token))).toBe(false);
    expect(await files.get(token, 2_000)).toBeUndefined();
    expect(readdirSync(dir)).toEqual([]);
  });

  it("sweeps expired images and abandoned partial writes, keeping live ones", async () => {
    const { files, dir } = store();
    const live = newImageToken();
    await files.put(live, { data: Buffer.from("a"), mimeType: "image/png", expiresAt: Date.now() + 60_000 });
    await files.put(newImageToken(), {
      data: Buffer.from("b"),
      mimeType: "image/png",
      expiresAt: Date.now() - 1,
    });
    await files.put(newImageToken(), {
      data: Buffer.from("c"),
      mimeType: "image/png",
      expiresAt: Date.now() - 1,
    });
    const orphan = join(dir, `${"0".repeat(64)}.img`);
    writeFileSync(orphan, "half");
    const old = (Date.now() - 2 * 3_600_000) / 1000;
    utimesSync(orphan, old, old);
    expect(await files.sweep(Date.now())).toBe(2);
    expect(readdirSync(dir)).toHaveLength(2);
    expect((await files.get(live, Date.now()))?.data).toEqual(Buffer.from("a"));
  });

  it("sweeps nothing before the first image", async () => {
    expect(await store().files.sweep(Date.now())).toBe(0);
  });
});
