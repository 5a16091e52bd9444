import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Model } from "../../gen/tollgate/inference/v1/inference_pb.js";

/** The Anthropic list shape of `GET /v1/models` (docs/protocols.md, "Listing models"), from the catalog. */
export function modelList(models: readonly Model[]) {
  const data = models.map((model) => ({
    type: "model",
    id: model.id,
    display_name: model.displayName,
    created_at: model.createdAt === undefined ? null : timestampDate(model.createdAt).toISOString(),
    max_input_tokens: Number(model.maxInputTokens),
    max_tokens: Number(model.maxTokens),
    aliases: model.aliases,
  }));
  return { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null };
}
