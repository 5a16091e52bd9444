/**
 * The Messages call rewritten for Amazon Bedrock's InvokeModel, as Anthropic's own Bedrock SDK
 * does (docs/providers.md, "Amazon Bedrock"): `anthropic_version: "bedrock-2023-05-31"` in the body,
 * `model` out of the body and into the path (URL-encoded: inference-profile ids carry a `:`),
 * `stream` out of the body and into the path (`/invoke-with-response-stream`), and the
 * `anthropic-beta` flags into the body as `anthropic_beta`. A count goes to Bedrock's CountTokens
 * (`POST /model/{id}/count-tokens`) with that same InvokeModel body, base64-encoded, as
 * `{"input":{"invokeModel":{"body":…}}}`. Pure: no I/O.
 */
import { betaFlags } from "../platform-answer.js";

/** The `anthropic_version` Bedrock requires in the body. */
export const BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31";

/** One InvokeModel request: its path (below the base URL) and its JSON body. */
export interface BedrockInvoke {
  readonly path: string;
  readonly body: string;
  readonly stream: boolean;
}

/** Rewrites a Messages body (already parsed) for Bedrock's model `modelId`. */
export function bedrockInvoke(
  messages: Readonly<Record<string, unknown>>,
  modelId: string,
  anthropicBeta: string,
): BedrockInvoke {
  const { model: _model, stream, ...rest } = messages;
  const body: Record<string, unknown> = { anthropic_version: BEDROCK_ANTHROPIC_VERSION, ...rest };
  const betas = betaFlags(anthropicBeta);
  if (betas.length > 0 && body.anthropic_beta === undefined) body.anthropic_beta = betas;
  const streaming = stream === true;
  const action = streaming ? "invoke-with-response-stream" : "invoke";
  return {
    path: `/model/${encodeURIComponent(modelId)}/${action}`,
    body: JSON.stringify(body),
    stream: streaming,
  };
}

/**
 * A count for Bedrock's CountTokens: the InvokeModel body it would count, base64 in
 * `input.invokeModel.body`. CountTokens takes a foundation-model id, not an inference profile,
 * so a geography prefix (`us.`, `eu.`, `global.`, …) is dropped; an InvokeModel body needs
 * `max_tokens`, which a count request does not carry, so 1 stands in (it is not counted).
 */
export function bedrockCountTokens(
  messages: Readonly<Record<string, unknown>>,
  modelId: string,
  anthropicBeta: string,
): BedrockInvoke {
  const { model: _model, stream: _stream, ...rest } = messages;
  const body: Record<string, unknown> = {
    anthropic_version: BEDROCK_ANTHROPIC_VERSION,
    max_tokens: 1,
    ...rest,
  };
  const betas = betaFlags(anthropicBeta);
  if (betas.length > 0 && body.anthropic_beta === undefined) body.anthropic_beta = betas;
  const foundationModel = modelId.replace(/^[a-z]+\.(?=anthropic\.)/, "");
  const invokeBody = Buffer.from(JSON.stringify(body), "utf8").toString("base64");
  return {
    path: `/model/${encodeURIComponent(foundationModel)}/count-tokens`,
    body: JSON.stringify({ input: { invokeModel: { body: invokeBody } } }),
    stream: false,
  };
}
