/**
 * The image models the gateway serves, as data: which provider adapter and provider model each
 * gateway id maps to, the sizes it offers (the price catalog's, one source of truth), the aspect
 * ratios, and the pixel size each (size, ratio) implies.
 */
import type { PriceCatalog } from "../billing/price-catalog.js";
import { IMAGE_SIZES, type ImageSize } from "../billing/price-catalog.js";

/** The provider wire formats an image model can be served through. */
export const IMAGE_ADAPTERS = ["gemini", "openai"] as const;
/** A provider wire format for images. */
export type ImageAdapter = (typeof IMAGE_ADAPTERS)[number];

/** Where one gateway image model is served: the adapter and the provider's model id. */
export interface ImageRoute {
  readonly adapter: ImageAdapter;
  readonly upstreamModel: string;
}

/** The aspect ratios every image model takes (the Gemini image models' list). */
export const ASPECT_RATIOS = [
  "1:1",
  "2:3",
  "3:2",
  "3:4",
  "4:3",
  "4:5",
  "5:4",
  "9:16",
  "16:9",
  "21:9",
] as const;
/** An aspect ratio the gateway accepts. */
export type AspectRatio = (typeof ASPECT_RATIOS)[number];

/**
 * Pixel size at 1K per ratio (gemini-3-pro-image's table; 2K doubles and 4K quadruples each
 * side). Every side is a multiple of 16, which pixel-sized providers require.
 */
const PIXELS_1K: Readonly<Record<AspectRatio, readonly [number, number]>> = {
  "1:1": [1024, 1024],
  "2:3": [816, 1232],
  "3:2": [1232, 816],
  "3:4": [896, 1200],
  "4:3": [1200, 896],
  "4:5": [896, 1136],
  "5:4": [1136, 896],
  "9:16": [768, 1376],
  "16:9": [1376, 768],
  "21:9": [1584, 672],
};
const SCALE: Readonly<Record<ImageSize, number>> = { "1K": 1, "2K": 2, "4K": 4 };

/** The pixel size (width, height) that a size and ratio imply. */
export function pixelSize(size: ImageSize, ratio: AspectRatio): { width: number; height: number } {
  const [width, height] = PIXELS_1K[ratio];
  return { width: width * SCALE[size], height: height * SCALE[size] };
}

/** Whether `value` is an aspect ratio the gateway accepts. */
export function isAspectRatio(value: string): value is AspectRatio {
  return (ASPECT_RATIOS as readonly string[]).includes(value);
}

/** The shipped routes: both models on the Gemini format. */
export const DEFAULT_IMAGE_ROUTES: Readonly<Record<string, ImageRoute>> = {
  "image-pro": { adapter: "gemini", upstreamModel: "gemini-3-pro-image-preview" },
  "image-2": { adapter: "gemini", upstreamModel: "gemini-2.5-flash-image" },
};

/**
 * Provider models that render only 1K and do not take `imageConfig.imageSize` (it is omitted;
 * 1K is the API's default).
 */
export const GEMINI_1K_ONLY = ["gemini-2.5-flash-image"] as const;

/** One served image model. */
export interface ImageModel {
  readonly id: string;
  readonly route: ImageRoute;
  /** The sizes the price catalog prices for it, in catalog order. */
  readonly sizes: readonly ImageSize[];
}

/** The served image models, by gateway id. */
export interface ImageModelCatalog {
  readonly models: readonly ImageModel[];
  resolve(id: string): ImageModel | undefined;
}

/**
 * The served image models: every model the price catalog prices and `routes` (the shipped
 * routes overridden per model by config) maps. A priced model without a route is not served.
 */
export function buildImageModelCatalog(
  prices: PriceCatalog,
  overrides: Readonly<Record<string, ImageRoute>> = {},
): ImageModelCatalog {
  const routes = { ...DEFAULT_IMAGE_ROUTES, ...overrides };
  const models: ImageModel[] = [];
  for (const [id, price] of prices.images) {
    const route = routes[id];
    if (route === undefined) continue;
    models.push({ id, route, sizes: IMAGE_SIZES.filter((size) => price.perImage.has(size)) });
  }
  const byId = new Map(models.map((model) => [model.id, model]));
  return { models, resolve: (id) => byId.get(id) };
}
