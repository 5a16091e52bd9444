import type { PriceCatalog } from "../core/billing/price-catalog.js";
import { IMAGE_ADAPTERS, type ImageAdapter, type ImageRoute } from "../core/images/image-models.js";
import { ConfigError, type Env, integer, optional, url } from "./read.js";
import { type UpstreamTimeouts, upstreamTimeouts } from "./text.js";

/** Where image calls go, how patiently, what uploads may weigh, and how long `url` images live. */
export interface ImagesConfig {
  /** A Gemini-format provider; url undefined when neither its URL nor its key is set. */
  readonly gemini: ImageProviderConfig;
  /** An OpenAI-images-compatible provider; url undefined when neither its URL nor its key is set. */
  readonly openai: ImageProviderConfig;
  /**
   * How patiently the image providers are waited on (TOLLGATE_IMAGE_*_TIMEOUT_MS); each defaults
   * to the text provider's (TOLLGATE_UPSTREAM_*_TIMEOUT_MS).
   */
  readonly timeouts: UpstreamTimeouts;
  /** Per-model overrides of the shipped routes (TOLLGATE_IMAGE_MODELS). */
  readonly routes: Readonly<Record<string, ImageRoute>>;
  /** How long an image returned as `url` is served. */
  readonly urlTtlMs: number;
  /** Largest reference image accepted by `POST /v1/images/edits`. */
  readonly maxFileBytes: number;
  /** Largest `POST /v1/images/edits` body. */
  readonly maxRequestBytes: number;
}

/** One image provider's base URL (without its version path) and key. */
export interface ImageProviderConfig {
  readonly url: string | undefined;
  /** "" when unset. */
  readonly apiKey: string;
}

/** The core reads at most this much per RPC message; an edit body must fit with room to spare. */
export const MAX_IMAGE_REQUEST_BYTES = 60 * 1024 * 1024;

export function imagesConfig(env: Env, maxCallMs: number, textTimeouts: UpstreamTimeouts): ImagesConfig {
  const maxRequestBytes = integer(
    env,
    "TOLLGATE_IMAGE_MAX_REQUEST_BYTES",
    50 * 1024 * 1024,
    1024,
    MAX_IMAGE_REQUEST_BYTES,
  );
  // The default per-file limit never exceeds a lowered per-request limit.
  const maxFileBytes = integer(
    env,
    "TOLLGATE_IMAGE_MAX_FILE_BYTES",
    Math.min(10 * 1024 * 1024, maxRequestBytes),
    1024,
    maxRequestBytes,
  );
  return {
    gemini: imageProvider(env, "GEMINI", "https://generativelanguage.googleapis.com", /\/v1(beta)?$/),
    openai: imageProvider(env, "OPENAI_IMAGES", "https://api.openai.com", /\/v1$/),
    timeouts: upstreamTimeouts(env, "TOLLGATE_IMAGE", maxCallMs, textTimeouts),
    routes: imageRoutes(env),
    urlTtlMs: integer(env, "TOLLGATE_IMAGE_URL_TTL_S", 3_600, 1, 7 * 86_400) * 1000,
    maxFileBytes,
    maxRequestBytes,
  };
}

/** TOLLGATE_<name>_URL and TOLLGATE_<name>_API_KEY; a key alone means the public endpoint. */
function imageProvider(
  env: Env,
  name: string,
  publicEndpoint: string,
  versionSuffix: RegExp,
): ImageProviderConfig {
  const apiKey = optional(env, `TOLLGATE_${name}_API_KEY`) ?? "";
  const set = url(env, `TOLLGATE_${name}_URL`);
  if (set === undefined) return { url: apiKey === "" ? undefined : publicEndpoint, apiKey };
  // The client appends the version path itself; a trailing one in the setting would double it.
  return { url: set.raw.replace(/\/+$/, "").replace(versionSuffix, ""), apiKey };
}

/** TOLLGATE_IMAGE_MODELS: `model=adapter:provider-model`, comma-separated. */
function imageRoutes(env: Env): Record<string, ImageRoute> {
  const variable = "TOLLGATE_IMAGE_MODELS";
  const raw = optional(env, variable);
  const routes: Record<string, ImageRoute> = {};
  if (raw === undefined) return routes;
  for (const entry of raw.split(",").map((part) => part.trim())) {
    const match = /^([a-z0-9][a-z0-9.-]*)=([a-z]+):([A-Za-z0-9._\-/]+)$/.exec(entry);
    if (match === null) {
      throw new ConfigError(
        variable,
        `expected model=adapter:provider-model (e.g. image-2=openai:gpt-image-1), got ${JSON.stringify(entry)}`,
      );
    }
    const [, model = "", adapter = "", upstreamModel = ""] = match;
    if (!(IMAGE_ADAPTERS as readonly string[]).includes(adapter)) {
      throw new ConfigError(
        variable,
        `adapter must be one of ${IMAGE_ADAPTERS.join(", ")}, got ${JSON.stringify(adapter)}`,
      );
    }
    routes[model] = { adapter: adapter as ImageAdapter, upstreamModel };
  }
  return routes;
}

/** Every routed image model must be priced: the gateway never serves what it cannot bill. */
export function checkImageRoutes(images: ImagesConfig, catalog: PriceCatalog): void {
  for (const model of Object.keys(images.routes)) {
    if (!catalog.images.has(model)) {
      const priced = [...catalog.images.keys()].join(", ");
      throw new ConfigError(
        "TOLLGATE_IMAGE_MODELS",
        `${model} is not an image model of the catalog (${priced})`,
      );
    }
  }
}
