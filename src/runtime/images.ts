import type { Config } from "../config/config.js";
import type { ImageDeps } from "../core/core.js";
import type { ImageAdapter } from "../core/images/image-models.js";
import { GEMINI_1K_ONLY, IMAGE_ADAPTERS } from "../core/images/image-models.js";
import type { ImageStore } from "../core/ports/image-store.js";
import type { ImageUpstream } from "../core/ports/providers.js";
import { LocalImageFiles } from "../store/shared/image-files.js";
import { GeminiImageUpstream } from "../upstream/gemini/client.js";
import { OpenaiImagesUpstream } from "../upstream/openai/client.js";
import type { ImageRouter } from "../upstream/router/image-router.js";

/** How often expired `url` images are removed from storage. */
export const IMAGE_SWEEP_INTERVAL_MS = 60_000;

/** The image side of a built gateway: what the core needs, and what shutdown must stop. */
export interface ImageResources {
  readonly deps: ImageDeps;
  /** Sweeps expired `url` images once now, then every {@link IMAGE_SWEEP_INTERVAL_MS}. */
  startSweeper(onError: (error: unknown) => void): void;
  /** Stops the sweeper and closes the provider pools. */
  close(): Promise<void>;
}

/**
 * Builds the image providers that are configured (a Gemini-format and an OpenAI-images
 * format one), the `url` store and its sweeper: `shared` when the store has one every host
 * reads (PostgreSQL), else files under the data directory. With a providers file's `router`, the
 * models it routes go through its endpoints (docs/providers.md), any other to the provider of the
 * variables.
 */
export function imageResources(config: Config, shared?: ImageStore, router?: ImageRouter): ImageResources {
  const { images } = config;
  // The image providers' own (TOLLGATE_IMAGE_*_TIMEOUT_MS, the text provider's by default).
  const { timeouts } = images;
  const upstreams: Partial<Record<ImageAdapter, ImageUpstream>> = {};
  if (images.gemini.url !== undefined) {
    upstreams.gemini = new GeminiImageUpstream({
      baseUrl: images.gemini.url,
      apiKey: images.gemini.apiKey,
      ...timeouts,
      models: Object.fromEntries(GEMINI_1K_ONLY.map((model) => [model, { sendImageSize: false }])),
    });
  }
  if (images.openai.url !== undefined) {
    upstreams.openai = new OpenaiImagesUpstream({
      baseUrl: images.openai.url,
      apiKey: images.openai.apiKey,
      ...timeouts,
    });
  }
  const plain = { ...upstreams };
  if (router !== undefined) {
    for (const adapter of IMAGE_ADAPTERS) upstreams[adapter] = router.upstream(plain[adapter]);
  }
  // Several hosts: in the shared store, so that any host serves the URL. One host: the
  // database's own directory, where one data dir holds everything the gateway keeps.
  const store = shared ?? new LocalImageFiles(config.dataDir);
  let timer: NodeJS.Timeout | undefined;
  return {
    deps: {
      upstreams,
      store,
      urlTtlMs: images.urlTtlMs,
      routes: images.routes,
      perMinute: config.rateLimitPerMinute,
    },
    startSweeper(onError) {
      const sweep = () => {
        store.sweep(Date.now()).catch(onError);
      };
      sweep();
      timer = setInterval(sweep, IMAGE_SWEEP_INTERVAL_MS);
      timer.unref();
    },
    async close() {
      clearInterval(timer);
      await Promise.all([...Object.values(plain).map((upstream) => upstream.close()), router?.close()]);
    },
  };
}
