/**
 * Builds the text endpoints and the router of a providers file (docs/providers.md). Each kind's
 * client is loaded when a file names it: Bedrock's and Vertex's (src/upstream/bedrock/,
 * src/upstream/vertex/) by dynamic import, so a build without them still runs every file that
 * does not name them, and refuses one that does with a message naming the endpoint.
 */
import type { UpstreamTimeouts } from "../config/config.js";
import type { EndpointConfig, ProvidersConfig } from "../config/providers.js";
import type { EndpointBase, TextEndpoint } from "../upstream/endpoint.js";
import type { RouterEvents } from "../upstream/router/router-events.js";
import type { TextRouter } from "../upstream/router/text-router.js";

/** A providers file's endpoint whose kind this build cannot reach. */
export class EndpointUnavailable extends Error {
  constructor(file: string, endpoint: EndpointConfig, cause: unknown) {
    super(
      `${file}: ${endpoint.field}: kind ${endpoint.kind} (endpoint ${endpoint.name}) is not available in this build`,
      { cause },
    );
    this.name = "EndpointUnavailable";
  }
}

/** A module path held in a variable, so the type checker does not require the module to exist. */
async function load(path: string): Promise<Record<string, unknown>> {
  return (await import(path)) as Record<string, unknown>;
}

type EndpointClass = new (options: never) => TextEndpoint;

/** The client class a kind's module exports, or the build's refusal. */
async function clientClass(
  providers: ProvidersConfig,
  endpoint: EndpointConfig,
  path: string,
  exported: string,
): Promise<EndpointClass> {
  try {
    const module = await load(path);
    const found = module[exported];
    if (typeof found !== "function") throw new Error(`${path} exports no ${exported}`);
    return found as EndpointClass;
  } catch (error) {
    throw new EndpointUnavailable(providers.file, endpoint, error);
  }
}

/** One text endpoint of the file, its secrets resolved (an unset one is "": `serve` refused it already). */
export async function textEndpoint(
  providers: ProvidersConfig,
  endpoint: EndpointConfig,
  timeouts: UpstreamTimeouts,
): Promise<TextEndpoint> {
  const base: EndpointBase = {
    name: endpoint.name,
    models: endpoint.models,
    connections: endpoint.connections,
    ...timeouts,
  };
  switch (endpoint.kind) {
    case "anthropic": {
      const { AnthropicUpstream } = await import("../upstream/anthropic/client.js");
      return new AnthropicUpstream({
        ...base,
        baseUrl: endpoint.baseUrl,
        apiKey: endpoint.apiKey.value ?? "",
      });
    }
    case "bedrock": {
      const Bedrock = await clientClass(
        providers,
        endpoint,
        "../upstream/bedrock/client.js",
        "BedrockUpstream",
      );
      const { auth } = endpoint;
      return new Bedrock({
        ...base,
        region: endpoint.region,
        ...(endpoint.baseUrl === undefined ? {} : { baseUrl: endpoint.baseUrl }),
        auth:
          auth.kind === "bearer"
            ? { kind: "bearer", token: auth.token.value ?? "" }
            : {
                kind: "sigv4",
                accessKeyId: auth.accessKeyId.value ?? "",
                secretAccessKey: auth.secretAccessKey.value ?? "",
                ...(auth.sessionToken?.value === undefined ? {} : { sessionToken: auth.sessionToken.value }),
              },
      } as never);
    }
    case "vertex": {
      const Vertex = await clientClass(providers, endpoint, "../upstream/vertex/client.js", "VertexUpstream");
      return new Vertex({
        ...base,
        region: endpoint.region,
        projectId: endpoint.projectId,
        ...(endpoint.baseUrl === undefined ? {} : { baseUrl: endpoint.baseUrl }),
        serviceAccountKey: serviceAccountKey(providers, endpoint),
      } as never);
    }
    default:
      throw new TypeError(`${providers.file}: ${endpoint.field}: ${endpoint.kind} is not a text endpoint`);
  }
}

/** A Vertex endpoint's service-account key: the JSON its variable or file holds. */
export function serviceAccountKey(
  providers: ProvidersConfig,
  endpoint: EndpointConfig & { kind: "vertex" },
): object {
  const text = endpoint.serviceAccountKey.value ?? "{}";
  try {
    const key = JSON.parse(text) as unknown;
    if (typeof key === "object" && key !== null) return key;
  } catch {
    // Named below, without the text: it is a secret.
  }
  throw new TypeError(
    `${providers.file}: ${endpoint.serviceAccountKey.field}: ${endpoint.serviceAccountKey.source} does not hold a service-account key (JSON)`,
  );
}

/**
 * The text router over the file's text endpoints. `timeouts` are the text provider's; the
 * call's failover deadline defaults to its headers timeout. Endpoints opened before a failure
 * are closed again.
 */
export async function textRouter(
  providers: ProvidersConfig,
  timeouts: UpstreamTimeouts,
  events: RouterEvents | undefined,
): Promise<TextRouter> {
  const { TextRouter } = await import("../upstream/router/text-router.js");
  const names = new Set([...providers.text.values()].flat().map((entry) => entry.endpoint));
  const endpoints: TextEndpoint[] = [];
  try {
    for (const endpoint of providers.endpoints) {
      if (names.has(endpoint.name)) endpoints.push(await textEndpoint(providers, endpoint, timeouts));
    }
  } catch (error) {
    await Promise.all(endpoints.map((endpoint) => endpoint.close()));
    throw error;
  }
  return new TextRouter({
    endpoints,
    routes: providers.text,
    deadlineMs: providers.deadlineMs ?? timeouts.headersTimeoutMs,
    breaker: providers.breaker,
    maxRetryAfterMs: providers.maxRetryAfterMs,
    ...(events === undefined ? {} : { events }),
  });
}
