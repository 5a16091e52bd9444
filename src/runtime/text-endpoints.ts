/**
 * Builds the text endpoints and the router of a providers file (docs/providers.md). Each kind's
 * client (src/upstream/anthropic/, src/upstream/bedrock/, src/upstream/vertex/) is imported when
 * a file names it, not at the top: the operator's commands never load the provider clients.
 */
import type { UpstreamTimeouts } from "../config/config.js";
import type { EndpointConfig, ProvidersConfig } from "../config/providers.js";
import type { EndpointBase, TextEndpoint } from "../upstream/endpoint.js";
import type { RouterEvents } from "../upstream/router/router-events.js";
import type { TextRouter } from "../upstream/router/text-router.js";

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
      const { BedrockUpstream } = await import("../upstream/bedrock/client.js");
      const { auth } = endpoint;
      return new BedrockUpstream({
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
      });
    }
    case "vertex": {
      const { VertexUpstream } = await import("../upstream/vertex/client.js");
      return new VertexUpstream({
        ...base,
        region: endpoint.region,
        projectId: endpoint.projectId,
        ...(endpoint.baseUrl === undefined ? {} : { baseUrl: endpoint.baseUrl }),
        serviceAccountKey: serviceAccountKey(providers, endpoint),
      });
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
