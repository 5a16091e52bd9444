import type { TextCallSpec } from "../billing/pricing.js";
import { readBillableFeatures } from "./billable-features.js";
import { modelNotFound } from "./inference-errors.js";
import { inputTokenBound } from "./input-bound.js";
import {
  encodeMessagesRequest,
  type MessagesCall,
  type MessagesRequest,
  parseMessagesRequest,
} from "./messages-request.js";
import type { ModelCatalog, TextModel } from "./model-catalog.js";
import { repairView } from "./repair.js";

/** What preparing a request needs. */
export interface PrepareDeps {
  readonly models: ModelCatalog;
  /** The `max_uses` a web search tool without one is sent with. */
  readonly webSearchMaxUses: number;
}

/** A request parsed and repaired for its model, as it goes to the provider. */
export interface PreparedRequest {
  readonly model: TextModel;
  /** The request as the caller sent it. */
  readonly request: MessagesRequest;
  /** The request as it goes upstream (repaired, its billable features read). */
  readonly sent: MessagesRequest;
  /** Every change made (the x-gateway-repaired-params list). */
  readonly repaired: readonly string[];
  /** The server tools it carries, by type prefix (see billable-features.ts), for routing. */
  readonly serverTools: readonly string[];
}

/** A messages call ready to hold for: its request as sent and the worst case it can cost. */
export interface PreparedCall extends PreparedRequest {
  readonly stream: boolean;
  /** The client's max_tokens when it was clamped, else undefined. */
  readonly clampedFrom: number | undefined;
  /** The call as priced for its hold: its input's bound, its (clamped) max_tokens, its features. */
  readonly spec: TextCallSpec;
  /** The body the provider gets ({@link outgoingBody}). */
  readonly outgoing: string | Uint8Array;
  /** The most output a charge may count ({@link outputCap}); undefined for a multi-pass call. */
  readonly outputCap: bigint | undefined;
}

/**
 * Parses a messages call, resolves its model, repairs it and reads its billable features, and
 * prices its worst case: the input bound and the max_tokens it may write; and the body the
 * provider gets.
 */
export function prepareCall(deps: PrepareDeps, body: Uint8Array): PreparedCall {
  const request = parseMessagesRequest(body, "create");
  const { prepared, maxTokens, clampedFrom, features } = repairFor(deps, request);
  const spec: TextCallSpec = {
    kind: "text",
    model: prepared.model.id,
    inputTokens: inputTokenBound(body.byteLength, request.rest, prepared.model),
    // max_tokens is at least 1 (parseMessagesRequest): the hold is never zero-sized.
    maxTokens: BigInt(maxTokens),
    ...features,
  };
  return {
    ...prepared,
    stream: request.view.stream,
    clampedFrom,
    spec,
    outgoing: outgoingBody(prepared, body),
    outputCap: outputCap(spec),
  };
}

/**
 * The output ceiling of a call that samples once: its (clamped) max_tokens. A server-tool loop,
 * fallbacks, an advisor or compaction write several passes, each up to its own limit: those calls
 * are bounded by their hold only.
 */
export function outputCap(spec: TextCallSpec): bigint | undefined {
  const passes =
    spec.serverToolLoop === true ||
    (spec.fallbacks?.length ?? 0) > 0 ||
    spec.defaultFallback === true ||
    spec.advisor !== undefined ||
    spec.compaction === true;
  return passes ? undefined : spec.maxTokens;
}

/**
 * Parses a request of `kind` and prepares it like a call — the same repair, tool checks and
 * model names: what can be counted can be sent.
 */
export function prepareRequest(deps: PrepareDeps, body: Uint8Array, kind: MessagesCall): PreparedRequest {
  return repairFor(deps, parseMessagesRequest(body, kind)).prepared;
}

/** The model `name` names; 404 when it is not served. */
function resolveModel(models: ModelCatalog, name: string): TextModel {
  const model = models.resolve(name);
  if (model === undefined)
    throw modelNotFound(
      name,
      models.models.map((m) => m.id),
    );
  return model;
}

/**
 * The body the provider gets. When repair and the feature reader changed nothing (they hand back
 * their very inputs), the caller's bytes `body` go as they came: no re-serialisation of what can
 * be a 100 KB body, and what the client sent is what is billed.
 */
export function outgoingBody(prepared: PreparedRequest, body: Uint8Array): string | Uint8Array {
  const { request, sent } = prepared;
  const untouched = sent.view === request.view && sent.rest === request.rest;
  return untouched ? body : encodeMessagesRequest(sent);
}

/** Repairs a parsed request for its model and reads its billable features. */
function repairFor(deps: PrepareDeps, request: MessagesRequest) {
  const model = resolveModel(deps.models, request.view.model);
  const repair = repairView(request.view, model, request.call);
  const billable = readBillableFeatures(request.rest, deps.models, deps.webSearchMaxUses);
  const sent: MessagesRequest = { ...request, view: repair.view, rest: billable.rest };
  const prepared: PreparedRequest = {
    model,
    request,
    sent,
    repaired: [...repair.repaired, ...billable.repaired],
    serverTools: billable.serverTools,
  };
  return {
    prepared,
    maxTokens: repair.maxTokens,
    clampedFrom: repair.clampedFrom,
    features: billable.features,
  };
}
