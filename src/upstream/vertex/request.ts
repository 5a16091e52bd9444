/**
 * The Messages call rewritten for Claude on Vertex AI, as Anthropic's own Vertex SDK does
 * (docs/providers.md, "Google Vertex AI"): `anthropic_version: "vertex-2023-10-16"` in the body, `model`
 * out of the body and into the path (`…/publishers/anthropic/models/{model}:rawPredict`, or
 * `:streamRawPredict` when the body says `stream: true`, which stays in the body); a count goes
 * to `…/models/count-tokens:rawPredict` with the model kept in the body. Beta flags stay the
 * `anthropic-beta` header. Pure: no I/O.
 */

/** The `anthropic_version` Vertex requires in the body. */
export const VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16";

/** One rawPredict request: its path (below the base URL) and its JSON body. */
export interface VertexPredict {
  readonly path: string;
  readonly body: string;
}

/** Where one project's Anthropic models live in one region. */
export interface VertexLocation {
  readonly projectId: string;
  readonly region: string;
}

/** Rewrites a Messages (or count) body, already parsed, for Vertex's model `modelId`. */
export function vertexPredict(
  messages: Readonly<Record<string, unknown>>,
  modelId: string,
  location: VertexLocation,
  counting: boolean,
): VertexPredict {
  const models = `/v1/projects/${encodeURIComponent(location.projectId)}/locations/${encodeURIComponent(location.region)}/publishers/anthropic/models`;
  const { model: _model, ...rest } = messages;
  if (counting) {
    return {
      path: `${models}/count-tokens:rawPredict`,
      body: JSON.stringify({ anthropic_version: VERTEX_ANTHROPIC_VERSION, ...rest, model: modelId }),
    };
  }
  const method = messages.stream === true ? "streamRawPredict" : "rawPredict";
  return {
    path: `${models}/${modelId}:${method}`,
    body: JSON.stringify({ anthropic_version: VERTEX_ANTHROPIC_VERSION, ...rest }),
  };
}

/** Vertex's default base URL for a region (the multi-region `us`/`eu` have their own hosts). */
export function vertexBaseUrl(region: string): string {
  if (region === "global") return "https://aiplatform.googleapis.com";
  if (region === "us" || region === "eu") return `https://aiplatform.${region}.rep.googleapis.com`;
  return `https://${region}-aiplatform.googleapis.com`;
}
