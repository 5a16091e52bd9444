import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { defaultPriceCatalog } from "../billing/default-catalog.js";
import { errorInfo } from "../errors.js";
import { sniffImageType } from "./image-formats.js";
import { buildImageModelCatalog, pixelSize } from "./image-models.js";
import { type ImageFields, parseImageFields } from "./image-request.js";

const models = buildImageModelCatalog(defaultPriceCatalog());
const PNG = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]);
const base: ImageFields = {
  model: "image-pro",
  prompt: "a cat",
  size: "",
  aspectRatio: "",
  n: 0,
  references: undefined,
};

function fieldOf(fields: Partial<ImageFields>): string | undefined {
  try {
    parseImageFields({ ...base, ...fields }, models);
  } catch (error) {
    expect(error).toBeInstanceOf(ConnectError);
    expect((error as ConnectError).code).toBe(Code.InvalidArgument);
    return errorInfo(error as ConnectError)?.metadata.field;
  }
  return undefined;
}

describe("parseImageFields", () => {
  it("defaults to 1K and 1:1 and accepts n 1", () => {
    const params = parseImageFields({ ...base, n: 1 }, models);
    expect([params.model.id, params.size, params.aspectRatio, params.references]).toEqual([
      "image-pro",
      "1K",
      "1:1",
      [],
    ]);
  });

  it.each([
    [{ model: "" }, "model"],
    [{ model: "gpt-image-1" }, "model"],
    [{ prompt: "  " }, "prompt"],
    [{ prompt: "x".repeat(32_001) }, "prompt"],
    [{ size: "1k" }, "size"],
    [{ size: "1024x1024" }, "size"],
    [{ model: "image-2", size: "4K" }, "size"],
    [{ aspectRatio: "1:4" }, "aspect_ratio"],
    [{ aspectRatio: "16/9" }, "aspect_ratio"],
    [{ n: 2 }, "n"],
    [{ n: -1 }, "n"],
    [{ references: [] }, "image"],
    [{ references: Array.from({ length: 15 }, () => ({ data: PNG, filename: "a.png" })) }, "image"],
    [{ references: [{ data: new TextEncoder().encode("GIF89a……"), filename: "a.png" }] }, "image"],
  ])("refuses %j naming %s", (fields, field) => {
    expect(fieldOf(fields as Partial<ImageFields>)).toBe(field);
  });

  it("types references by content", () => {
    const params = parseImageFields({ ...base, references: [{ data: PNG, filename: "photo.jpg" }] }, models);
    expect(params.references.map((r) => r.mimeType)).toEqual(["image/png"]);
  });

  it("serves only priced models with a route, with the catalog's sizes", () => {
    expect(models.models.map((m) => [m.id, m.sizes, m.route.upstreamModel])).toEqual([
      ["image-pro", ["1K", "2K", "4K"], "gemini-3-pro-image-preview"],
      ["image-2", ["1K"], "gemini-2.5-flash-image"],
    ]);
    const rerouted = buildImageModelCatalog(defaultPriceCatalog(), {
      "image-2": { adapter: "openai", upstreamModel: "gpt-image-1" },
    });
    expect(rerouted.resolve("image-2")?.route).toEqual({ adapter: "openai", upstreamModel: "gpt-image-1" });
  });
});

describe("pixelSize", () => {
  it("scales the 1K table by 2 and 4, every side a multiple of 16", () => {
    expect(pixelSize("1K", "16:9")).toEqual({ width: 1376, height: 768 });
    expect(pixelSize("2K", "1:1")).toEqual({ width: 2048, height: 2048 });
    expect(pixelSize("4K", "9:16")).toEqual({ width: 3072, height: 5504 });
    for (const ratio of ["1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"] as const) {
      const { width, height } = pixelSize("1K", ratio);
      expect(width % 16, ratio).toBe(0);
      expect(height % 16, ratio).toBe(0);
      const [a = 1, b = 1] = ratio.split(":").map(Number);
      expect(Math.abs(width / height - a / b) / (a / b), ratio).toBeLessThan(0.03);
    }
  });
});

describe("sniffImageType", () => {
  it.each([
    [[0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], "image/png"],
    [[0xff, 0xd8, 0xff, 0xdb], "image/jpeg"],
    [[...Buffer.from("RIFF"), 1, 2, 3, 4, ...Buffer.from("WEBP")], "image/webp"],
    [[...Buffer.from("RIFF"), 1, 2, 3, 4, ...Buffer.from("WAVE")], undefined],
    [[...Buffer.from("GIF89a")], undefined],
    [[0x89, 0x50], undefined],
    [[], undefined],
  ])("%j → %s", (bytes, type) => {
    expect(sniffImageType(Uint8Array.from(bytes))).toBe(type);
  });
});
