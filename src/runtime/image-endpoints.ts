/**
 * Builds the image endpoints and the image router of a providers file (docs/providers.md,
 * "Images"): Gemini- and OpenAI-format endpoints with the clients in src/upstream/gemini/ and
 * src/upstream/openai/, Vertex's with src/upstream/vertex/images.ts (imported when a file names
 * one).
 */
import type { UpstreamTimeouts } from "../config/config.js";
import type { EndpointConfig, ProvidersConfig } from "../config/providers.js";
import { GEMINI_1K_ONLY } from "../core/images/image-models.js";
import type { ImageUpstream } from "../core/ports/providers.js";
import { GeminiImageUpstream } from "../upstream/gemini/client.js";
import { OpenaiImagesUpstream } from "../upstream/openai/client.js";
import type { ImageEndpoint, ImageRouter } from "../upstream/router/image-router.js";
import type { RouterEvents } from "../upstream/router/router-events.js";
import { serviceAccountKey } from "./text-endpoints.js";

/** One image endpoint of the file. */
async function imageEndpoint(
  providers: ProvidersConfig,
  endpoint: EndpointConfig,
  timeouts: UpstreamTimeouts,
): Promise<ImageEndpoint> {
  const pool = { ...timeouts, connections: endpoint.connections };
  let client: ImageUpstream;
  switch (endpoint.kind) {
    case "gemini":
      client = new GeminiImageUpstream({
        ...pool,
        baseUrl: endpoint.baseUrl,
        apiKey: endpoint.apiKey.value ?? "",
        models: Object.fromEntries(GEMINI_1K_ONLY.map((model) => [model, { sendImageSize: false }])),
      });
      break;
    case "openai":
      client = new OpenaiImagesUpstream({
        ...pool,
        baseUrl: endpoint.baseUrl,
        apiKey: endpoint.apiKey.value ?? "",
      });
      break;
    case "vertex": {
      const { VertexImages } = await import("../upstream/vertex/images.js");
      client = new VertexImages({
        name: endpoint.name,
        models: endpoint.models,
        connections: endpoint.connections,
        ...timeouts,
        region: endpoint.region,
        projectId: endpoint.projectId,
        ...(endpoint.baseUrl === undefined ? {} : { baseUrl: endpoint.baseUrl }),
        serviceAccountKey: serviceAccountKey(providers, endpoint),
      });
      break;
    }
    default:
      throw new TypeError(`${providers.file}: ${endpoint.field}: ${endpoint.kind} is not an image endpoint`);
  }
  return {
    name: endpoint.name,
    models: endpoint.models,
    generate: (request) => client.generate(request),
    close: () => client.close(),
  };
}

/** The image router over the file's image endpoints; the deadline defaults to the headers timeout. */
export async function imageRouter(
  providers: ProvidersConfig,
  timeouts: UpstreamTimeouts,
  events: RouterEvents | undefined,
): Promise<ImageRouter> {
  const { ImageRouter } = await import("../upstream/router/image-router.js");
  const names = new Set([...providers.images.values()].flat().map((entry) => entry.endpoint));
  const endpoints: ImageEndpoint[] = [];
  try {
    for (const endpoint of providers.endpoints) {
      if (names.has(endpoint.name)) endpoints.push(await imageEndpoint(providers, endpoint, timeouts));
    }
  } catch (error) {
    await Promise.all(endpoints.map((endpoint) => endpoint.close()));
    throw error;
  }
  return new ImageRouter({
    endpoints,
    routes: providers.images,
    deadlineMs: providers.deadlineMs ?? timeouts.headersTimeoutMs,
    breaker: providers.breaker,
    maxRetryAfterMs: providers.maxRetryAfterMs,
    ...(events === undefined ? {} : { events }),
  });
}
