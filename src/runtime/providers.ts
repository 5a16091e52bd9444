import type { Config } from "../config/config.js";
import type { HealthProbe } from "../core/health-service.js";
import type { TextUpstream } from "../core/ports/providers.js";
import type { DevUpstream } from "../dev/provider/dev-upstream.js";
import type { Stores } from "../store/shared/store-set.js";
import type { ImageResources } from "./images.js";
import type { Assembly } from "./resources.js";

/**
 * Dev mode's provider stand-ins: with no text provider configured, text calls go to the built-in
 * dev provider (and the ready line says so); with no image provider either, images go to the same
 * stand-in (it speaks the Gemini format too). In production the image routes are simply not served.
 */
export async function startDevProviders(a: Assembly): Promise<void> {
  if (a.config.anthropic.url === undefined && !routesText(a.config)) {
    const upstream = await startDevUpstreamOnce(a);
    a.config = { ...a.config, anthropic: { ...a.config.anthropic, url: upstream.url } };
  }
  if (!hasImageProvider(a.config)) {
    const upstream = await startDevUpstreamOnce(a);
    const { images } = a.config;
    a.config = { ...a.config, images: { ...images, gemini: { ...images.gemini, url: upstream.url } } };
    a.parts.dev = { ...a.parts.dev, images: true };
  }
}

/**
 * The model providers a gateway calls: the text provider (the router of a providers file, else
 * the one Anthropic endpoint of the variables), the image side, and the probes of its endpoints.
 */
export interface Providers {
  readonly textUpstream: TextUpstream | undefined;
  readonly images: ImageResources;
  readonly probes: readonly HealthProbe[];
}

/**
 * Opens the configured providers' connection pools; each is closed with the runtime. `url` images
 * are kept in the store when it is shared by several hosts, else in the data directory.
 */
export async function openProviders(a: Assembly, stores: Stores): Promise<Providers> {
  const { config } = a;
  // Loaded here, not at the top: the operator's commands never load the provider clients.
  const { AnthropicUpstream } = await import("../upstream/anthropic/client.js");
  const { imageResources } = await import("./images.js");
  const { anthropic, providers } = config;
  let textUpstream: TextUpstream | undefined;
  const probes: HealthProbe[] = [];
  if (providers !== undefined && providers.text.size > 0) {
    const { textRouter } = await import("./text-endpoints.js");
    const watch = await import("./provider-watch.js");
    const metrics = a.parts.metrics?.registry;
    const router = await textRouter(providers, anthropic, metrics && watch.routerMetrics(metrics));
    a.stack.defer(() => router.close());
    const breakers = () => router.breakers();
    if (metrics !== undefined) watch.breakerGauge(metrics, breakers);
    probes.push(watch.breakerProbe(breakers));
    textUpstream = router;
  } else if (anthropic.url !== undefined) {
    const upstream = new AnthropicUpstream({
      baseUrl: anthropic.url,
      apiKey: anthropic.apiKey,
      connectTimeoutMs: anthropic.connectTimeoutMs,
      headersTimeoutMs: anthropic.headersTimeoutMs,
      idleTimeoutMs: anthropic.idleTimeoutMs,
      responseTimeoutMs: anthropic.responseTimeoutMs,
      // Every streaming call holds its own HTTP/1.1 connection for as long as it runs.
      connections: config.upstreamConnections === 0 ? null : config.upstreamConnections,
    });
    textUpstream = upstream;
    a.parts.textUpstream = upstream;
    a.stack.defer(() => upstream.close());
  }
  let imageRouter: Awaited<ReturnType<typeof import("./image-endpoints.js")["imageRouter"]>> | undefined;
  if (providers !== undefined && providers.images.size > 0) {
    const built = await import("./image-endpoints.js");
    const watch = await import("./provider-watch.js");
    const metrics = a.parts.metrics?.registry;
    imageRouter = await built.imageRouter(
      providers,
      config.images.timeouts,
      metrics && watch.routerMetrics(metrics),
    );
    const router = imageRouter;
    const breakers = () => router.breakers();
    if (metrics !== undefined) watch.breakerGauge(metrics, breakers, "image");
    probes.push(watch.breakerProbe(breakers, "image provider endpoints"));
  }
  const images = imageResources(config, stores.images, imageRouter);
  a.parts.images = images;
  a.stack.defer(() => images.close());
  return { textUpstream, images, probes };
}

/** Whether a providers file routes text models (then no dev provider stands in for text). */
function routesText(config: Config): boolean {
  return config.providers !== undefined && config.providers.text.size > 0;
}

/** The dev provider, started at most once per runtime (text and images share it). */
async function startDevUpstreamOnce(a: Assembly): Promise<DevUpstream> {
  if (a.parts.dev.upstream !== undefined) return a.parts.dev.upstream;
  const { startDevUpstream } = await import("../dev/provider/dev-upstream.js");
  const upstream = await startDevUpstream({ host: "127.0.0.1", port: 0 });
  a.stack.defer(() => upstream.close());
  a.parts.dev = { ...a.parts.dev, upstream };
  return upstream;
}

/** Whether any image provider is configured (Gemini or OpenAI-images format). */
function hasImageProvider(config: Config): boolean {
  return config.images.gemini.url !== undefined || config.images.openai.url !== undefined;
}
