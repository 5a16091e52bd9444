/**
 * The providers file (TOLLGATE_PROVIDERS, docs/providers.md): the provider endpoints, JSON or
 * YAML, and per gateway model the ordered list of endpoints that serve it. Validated whole at
 * start; every problem is named by its path in the file (`endpoints[2].models["x"]: …`).
 * Credentials are named, never written: `{"env": "VAR"}` or `{"file": "/path"}`; the secret is
 * read here (the one place that reads the environment), and a variable that is unset is listed
 * by `serve`'s refusal (src/runtime/refusals.ts).
 */
import { readFileSync } from "node:fs";
import { basename, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import type { PriceCatalog } from "../core/billing/price-catalog.js";
import { ConfigError, type Env, optional } from "./read.js";

/** One endpoint in a model's route (the router's RouteEntry, src/upstream/router/route-order.ts). */
export interface RouteEntry {
  readonly endpoint: string;
  /** Lower is tried first; an entry without one takes its position in the list. */
  readonly priority: number;
  /** The share of calls within its priority. */
  readonly weight: number;
}

/** When an endpoint's breaker opens and for how long (src/upstream/router/breaker.ts). */
export interface BreakerConfig {
  readonly failures: number;
  readonly windowMs: number;
  readonly cooldownMs: number;
}

/** A breaker's defaults: 5 failures within 30 s open it for 30 s. */
const DEFAULT_BREAKER: BreakerConfig = { failures: 5, windowMs: 30_000, cooldownMs: 30_000 };

/** Where a secret is: an environment variable or a file, and its value (undefined: the variable is unset). */
export interface SecretRef {
  /** `env VAR` or `file /path`: how messages name it. */
  readonly source: string;
  /** Where in the file it is named (`endpoints[1].apiKey`). */
  readonly field: string;
  readonly value: string | undefined;
}

/** Bedrock's credentials: SigV4 keys, or a Bedrock API key sent as a bearer token. */
export type BedrockAuthConfig =
  | {
      readonly kind: "sigv4";
      readonly accessKeyId: SecretRef;
      readonly secretAccessKey: SecretRef;
      readonly sessionToken: SecretRef | undefined;
    }
  | { readonly kind: "bearer"; readonly token: SecretRef };

/** What every endpoint has. */
interface EndpointCommon {
  readonly name: string;
  /** `endpoints[i]`, for messages. */
  readonly field: string;
  /** Most connections open to it at once; null for no limit. */
  readonly connections: number | null;
  /** Gateway model id → the endpoint's own model id. */
  readonly models: ReadonlyMap<string, string>;
}

/** One endpoint as the file configures it. */
export type EndpointConfig = EndpointCommon &
  (
    | { readonly kind: "anthropic"; readonly baseUrl: string; readonly apiKey: SecretRef }
    | {
        readonly kind: "bedrock";
        readonly region: string;
        readonly baseUrl: string | undefined;
        readonly auth: BedrockAuthConfig;
      }
    | {
        readonly kind: "vertex";
        readonly region: string;
        readonly projectId: string;
        readonly baseUrl: string | undefined;
        readonly serviceAccountKey: SecretRef;
      }
    | { readonly kind: "gemini" | "openai"; readonly baseUrl: string; readonly apiKey: SecretRef }
  );

/** The providers file, validated. */
export interface ProvidersConfig {
  /** The file's name, as messages name it. */
  readonly file: string;
  readonly endpoints: readonly EndpointConfig[];
  /** Gateway text model → its endpoints (by name). */
  readonly text: ReadonlyMap<string, readonly RouteEntry[]>;
  /** Gateway image model → its endpoints (by name). */
  readonly images: ReadonlyMap<string, readonly RouteEntry[]>;
  /** One deadline per call to reach an answer it keeps; undefined: the headers timeout. */
  readonly deadlineMs: number | undefined;
  /** The longest `retry-after` honoured as a cooldown. */
  readonly maxRetryAfterMs: number;
  readonly breaker: BreakerConfig;
}

const TEXT_KINDS = ["anthropic", "bedrock", "vertex"];
const IMAGE_KINDS = ["gemini", "openai", "vertex"];
const KINDS = ["anthropic", "bedrock", "vertex", "gemini", "openai"] as const;
const PUBLIC_URLS: Readonly<Record<string, string>> = {
  anthropic: "https://api.anthropic.com",
  gemini: "https://generativelanguage.googleapis.com",
  openai: "https://api.openai.com",
};
/** What an environment variable's name looks like; anything else named as one is refused. */
const VARIABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** Prefixes of real keys: a value like this is a secret written inline. */
const SECRET_LOOKS = /^(sk-|sk_|AKIA|ASIA|AIza|ya29\.|ABSK|-----BEGIN)/;
const NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

type Fields = Record<string, unknown>;

/** A problem at a path of the file. */
class FileProblem extends Error {}

/** Reads TOLLGATE_PROVIDERS; undefined when unset (the single-endpoint variables apply). */
export function providersConfig(env: Env, cwd: string, catalog: PriceCatalog): ProvidersConfig | undefined {
  const variable = "TOLLGATE_PROVIDERS";
  const raw = optional(env, variable);
  if (raw === undefined) return undefined;
  const path = resolve(cwd, raw);
  const file = basename(path);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(variable, `cannot read ${path}: ${(error as Error).message}`);
  }
  let json: unknown;
  try {
    json = /\.ya?ml$/i.test(path) ? parseYaml(text) : JSON.parse(text);
  } catch (error) {
    throw new ConfigError(
      variable,
      `${file} is not valid ${/\.ya?ml$/i.test(path) ? "YAML" : "JSON"}: ${(error as Error).message}`,
    );
  }
  try {
    return parseProviders(json, { file, env, cwd, catalog });
  } catch (error) {
    if (error instanceof FileProblem) throw new ConfigError(variable, `${file}: ${error.message}`);
    throw error;
  }
}

/** What parsing needs besides the file's content. */
export interface ParseContext {
  readonly file: string;
  readonly env: Env;
  /** Credential files are resolved against it. */
  readonly cwd: string;
  readonly catalog: PriceCatalog;
}

/** Validates a parsed providers file; throws naming the path of the first problem. */
export function parseProviders(json: unknown, context: ParseContext): ProvidersConfig {
  const top = object(json, "(the file)");
  known(top, "", ["endpoints", "text", "images", "failover", "breaker"]);
  const list = top.endpoints;
  if (!Array.isArray(list) || list.length === 0) throw problem("endpoints", "must be a non-empty list");
  const endpoints = list.map((entry, i) => endpoint(entry, `endpoints[${i}]`, context));
  const byName = new Map<string, EndpointConfig>();
  for (const entry of endpoints) {
    if (byName.has(entry.name)) throw problem(`${entry.field}.name`, `${entry.name} names two endpoints`);
    byName.set(entry.name, entry);
  }
  const text = routes(top.text, "text", byName, TEXT_KINDS, context.catalog.text);
  const images = routes(top.images, "images", byName, IMAGE_KINDS, context.catalog.images);
  if (text.size === 0 && images.size === 0) throw problem("text", "no model is routed (text or images)");
  const textNames = new Set([...text.values()].flat().map((entry) => entry.endpoint));
  for (const entry of [...images.values()].flat()) {
    if (textNames.has(entry.endpoint))
      throw problem(
        byName.get(entry.endpoint)!.field,
        `${entry.endpoint} is routed for both text and images: give each its own endpoint`,
      );
  }
  const routed = new Set([...text.values(), ...images.values()].flat().map((entry) => entry.endpoint));
  for (const entry of endpoints) {
    if (!routed.has(entry.name)) throw problem(entry.field, `${entry.name} is in no route of text or images`);
  }
  const failover = top.failover === undefined ? {} : object(top.failover, "failover");
  known(failover, "failover", ["deadlineMs", "maxRetryAfterMs"]);
  const breakerFields = top.breaker === undefined ? {} : object(top.breaker, "breaker");
  known(breakerFields, "breaker", ["failures", "windowMs", "cooldownMs"]);
  return {
    file: context.file,
    endpoints,
    text,
    images,
    deadlineMs: optionalInt(failover.deadlineMs, "failover.deadlineMs", 1, 86_400_000),
    maxRetryAfterMs:
      optionalInt(failover.maxRetryAfterMs, "failover.maxRetryAfterMs", 0, 3_600_000) ?? 60_000,
    breaker: {
      failures:
        optionalInt(breakerFields.failures, "breaker.failures", 1, 1_000_000) ?? DEFAULT_BREAKER.failures,
      windowMs:
        optionalInt(breakerFields.windowMs, "breaker.windowMs", 1, 86_400_000) ?? DEFAULT_BREAKER.windowMs,
      cooldownMs:
        optionalInt(breakerFields.cooldownMs, "breaker.cooldownMs", 1, 86_400_000) ??
        DEFAULT_BREAKER.cooldownMs,
    },
  };
}

/** Every secret the file names whose variable is unset: what `serve` refuses to start without. */
export function missingSecrets(providers: ProvidersConfig): string[] {
  const missing: string[] = [];
  for (const endpoint of providers.endpoints) {
    for (const ref of secretsOf(endpoint)) {
      if (ref.value === undefined)
        missing.push(`${ref.source.slice(4)} (${providers.file}: ${ref.field} names it; it is unset)`);
    }
  }
  return missing;
}

/** The secrets an endpoint names. */
function secretsOf(endpoint: EndpointConfig): SecretRef[] {
  switch (endpoint.kind) {
    case "bedrock":
      return endpoint.auth.kind === "bearer"
        ? [endpoint.auth.token]
        : [
            endpoint.auth.accessKeyId,
            endpoint.auth.secretAccessKey,
            ...(endpoint.auth.sessionToken ? [endpoint.auth.sessionToken] : []),
          ];
    case "vertex":
      return [endpoint.serviceAccountKey];
    default:
      return [endpoint.apiKey];
  }
}

function endpoint(json: unknown, field: string, context: ParseContext): EndpointConfig {
  const fields = object(json, field);
  const kind = fields.kind;
  if (typeof kind !== "string" || !(KINDS as readonly string[]).includes(kind))
    throw problem(`${field}.kind`, `must be one of ${KINDS.join(", ")}, got ${JSON.stringify(kind)}`);
  const name = fields.name;
  if (typeof name !== "string" || !NAME.test(name))
    throw problem(
      `${field}.name`,
      `must be a name of lowercase letters, digits, ".", "_" or "-" (at most 64), got ${JSON.stringify(name)}`,
    );
  const common: EndpointCommon = {
    name,
    field,
    connections: optionalInt(fields.connections, `${field}.connections`, 1, 100_000) ?? null,
    models: models(fields.models, `${field}.models`),
  };
  const secret = (key: string) => secretRef(fields[key], `${field}.${key}`, context);
  switch (kind) {
    case "anthropic":
    case "gemini":
    case "openai":
      known(fields, field, ["name", "kind", "connections", "models", "baseUrl", "apiKey"]);
      return {
        ...common,
        kind,
        baseUrl: baseUrl(fields.baseUrl, `${field}.baseUrl`) ?? PUBLIC_URLS[kind]!,
        apiKey: secret("apiKey"),
      };
    case "bedrock": {
      known(fields, field, ["name", "kind", "connections", "models", "baseUrl", "region", "auth"]);
      const auth = object(fields.auth, `${field}.auth`);
      const at = `${field}.auth`;
      let parsed: BedrockAuthConfig;
      if (auth.kind === "sigv4") {
        known(auth, at, ["kind", "accessKeyId", "secretAccessKey", "sessionToken"]);
        parsed = {
          kind: "sigv4",
          accessKeyId: secretRef(auth.accessKeyId, `${at}.accessKeyId`, context),
          secretAccessKey: secretRef(auth.secretAccessKey, `${at}.secretAccessKey`, context),
          sessionToken:
            auth.sessionToken === undefined
              ? undefined
              : secretRef(auth.sessionToken, `${at}.sessionToken`, context),
        };
      } else if (auth.kind === "bearer") {
        known(auth, at, ["kind", "token"]);
        parsed = { kind: "bearer", token: secretRef(auth.token, `${at}.token`, context) };
      } else {
        throw problem(`${at}.kind`, `must be "sigv4" or "bearer", got ${JSON.stringify(auth.kind)}`);
      }
      return {
        ...common,
        kind,
        region: word(fields.region, `${field}.region`),
        baseUrl: baseUrl(fields.baseUrl, `${field}.baseUrl`),
        auth: parsed,
      };
    }
    default:
      known(fields, field, [
        "name",
        "kind",
        "connections",
        "models",
        "baseUrl",
        "region",
        "projectId",
        "serviceAccountKey",
      ]);
      return {
        ...common,
        kind: "vertex",
        region: word(fields.region, `${field}.region`),
        projectId: word(fields.projectId, `${field}.projectId`),
        baseUrl: baseUrl(fields.baseUrl, `${field}.baseUrl`),
        serviceAccountKey: secret("serviceAccountKey"),
      };
  }
}

/** Per model routes: `{ "<gateway model>": ["endpoint", {"endpoint": "…", "priority": 2, "weight": 3}] }`. */
function routes(
  json: unknown,
  field: "text" | "images",
  endpoints: ReadonlyMap<string, EndpointConfig>,
  kinds: readonly string[],
  priced: ReadonlyMap<string, unknown>,
): Map<string, RouteEntry[]> {
  const result = new Map<string, RouteEntry[]>();
  if (json === undefined) return result;
  for (const [model, list] of Object.entries(object(json, field))) {
    const at = `${field}[${JSON.stringify(model)}]`;
    // "*": every text model the file does not name, sent with the catalog's own model ids.
    const anyModel = field === "text" && model === "*";
    if (!anyModel && !priced.has(model)) {
      const known = [...priced.keys()].join(", ");
      throw problem(
        at,
        `${model} is not a ${field === "text" ? "text" : "image"} model of the price catalog (${known}): the gateway never serves what it cannot bill`,
      );
    }
    if (!Array.isArray(list) || list.length === 0) throw problem(at, "must be a non-empty list of endpoints");
    const entries = list.map((item, i) => routeEntry(item, `${at}[${i}]`, i));
    const seen = new Set<string>();
    for (const [i, entry] of entries.entries()) {
      const where = `${at}[${i}]`;
      const target = endpoints.get(entry.endpoint);
      if (target === undefined)
        throw problem(where, `no endpoint is named ${JSON.stringify(entry.endpoint)}`);
      if (!kinds.includes(target.kind))
        throw problem(where, `${entry.endpoint} is a ${target.kind} endpoint, which does not serve ${field}`);
      if (seen.has(entry.endpoint)) throw problem(where, `${entry.endpoint} is listed twice`);
      seen.add(entry.endpoint);
      if (anyModel && target.kind !== "anthropic")
        throw problem(
          where,
          `${entry.endpoint} is a ${target.kind} endpoint: only anthropic endpoints serve "*" (the others need a model id per model)`,
        );
      if (target.kind !== "anthropic" && !target.models.has(model))
        throw problem(`${target.field}.models`, `has no model id for ${model}, which ${where} routes to it`);
    }
    result.set(model, entries);
  }
  return result;
}

function routeEntry(json: unknown, field: string, position: number): RouteEntry {
  if (typeof json === "string") return { endpoint: json, priority: position, weight: 1 };
  const fields = object(json, field);
  known(fields, field, ["endpoint", "priority", "weight"]);
  if (typeof fields.endpoint !== "string") throw problem(`${field}.endpoint`, "must be an endpoint's name");
  const weight = fields.weight ?? 1;
  if (typeof weight !== "number" || !(weight > 0) || !Number.isFinite(weight))
    throw problem(`${field}.weight`, `must be a positive number, got ${JSON.stringify(weight)}`);
  return {
    endpoint: fields.endpoint,
    priority: optionalInt(fields.priority, `${field}.priority`, 0, 1_000_000) ?? position,
    weight,
  };
}

function models(json: unknown, field: string): Map<string, string> {
  const result = new Map<string, string>();
  if (json === undefined) return result;
  for (const [model, id] of Object.entries(object(json, field))) {
    if (typeof id !== "string" || !/^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}$/.test(id))
      throw problem(
        `${field}[${JSON.stringify(model)}]`,
        `must be the endpoint's model id, got ${JSON.stringify(id)}`,
      );
    result.set(model, id);
  }
  return result;
}

/**
 * A secret named by where it is: `{"env": "VAR"}` (read now; unset is left for `serve` to refuse)
 * or `{"file": "path"}` (read now; unreadable stops the start). A string is refused: the file
 * would then hold the secret itself.
 */
function secretRef(json: unknown, field: string, context: ParseContext): SecretRef {
  if (typeof json === "string") {
    throw problem(
      field,
      `must name where the secret is — {"env": "VARIABLE"} or {"file": "/path"} — never the secret itself${SECRET_LOOKS.test(json) ? " (this looks like a key: rotate it)" : ""}`,
    );
  }
  const fields = object(json, field);
  known(fields, field, ["env", "file"]);
  if (typeof fields.env === "string" && fields.file === undefined) {
    if (!VARIABLE_NAME.test(fields.env) || SECRET_LOOKS.test(fields.env))
      throw problem(`${field}.env`, "must be the name of an environment variable, not a secret");
    return { source: `env ${fields.env}`, field, value: optional(context.env, fields.env) };
  }
  if (typeof fields.file === "string" && fields.env === undefined) {
    const path = resolve(context.cwd, fields.file);
    let value: string;
    try {
      value = readFileSync(path, "utf8").trim();
    } catch (error) {
      throw problem(`${field}.file`, `cannot read ${path}: ${(error as Error).message}`);
    }
    if (value === "") throw problem(`${field}.file`, `${path} is empty`);
    return { source: `file ${path}`, field, value };
  }
  throw problem(field, `must be {"env": "VARIABLE"} or {"file": "/path"}`);
}

function baseUrl(json: unknown, field: string): string | undefined {
  if (json === undefined) return undefined;
  if (typeof json !== "string") throw problem(field, "must be an http(s) URL");
  let parsed: URL;
  try {
    parsed = new URL(json);
  } catch {
    throw problem(field, `must be an http(s) URL, got ${JSON.stringify(json)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw problem(field, `must be an http(s) URL, got ${JSON.stringify(json)}`);
  if (parsed.username !== "" || parsed.password !== "")
    throw problem(field, "must not carry credentials: name them in the endpoint's credential field");
  // Clients append /v1/…; a trailing /v1 or slash would double it.
  return json.replace(/\/+$/, "").replace(/\/v1(beta)?$/, "");
}

function word(json: unknown, field: string): string {
  if (typeof json !== "string" || !/^[a-z0-9][a-z0-9-]{0,62}$/.test(json))
    throw problem(field, `required: lowercase letters, digits and "-", got ${JSON.stringify(json)}`);
  return json;
}

function optionalInt(json: unknown, field: string, min: number, max: number): number | undefined {
  if (json === undefined) return undefined;
  if (typeof json !== "number" || !Number.isSafeInteger(json) || json < min || json > max)
    throw problem(field, `must be a whole number between ${min} and ${max}, got ${JSON.stringify(json)}`);
  return json;
}

function object(json: unknown, field: string): Fields {
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw problem(field, "must be an object");
  return json as Fields;
}

function known(fields: Fields, field: string, allowed: readonly string[]): void {
  for (const key of Object.keys(fields)) {
    if (!allowed.includes(key))
      throw problem(
        field === "" ? key : `${field}.${key}`,
        `unknown field (expected one of ${allowed.join(", ")})`,
      );
  }
}

function problem(field: string, message: string): FileProblem {
  return new FileProblem(`${field}: ${message}`);
}
