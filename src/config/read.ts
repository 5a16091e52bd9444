import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseDecimalAmount } from "../core/billing/money.js";

/** The environment the configuration is read from. */
export type Env = Readonly<Record<string, string | undefined>>;

/** Thrown for invalid configuration; the message always names the variable. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = "ConfigError";
  }
}

/*
 * One reader per kind of value. Each takes the environment and the variable's name, returns the
 * value (or the default when unset or blank), and stops the process with a ConfigError naming the
 * variable when the value is not one of its kind.
 */

/** Any text, trimmed; undefined when unset or blank. */
export function optional(env: Env, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value.trim() === "" ? undefined : value.trim();
}

/** A whole number between `min` and `max`. */
export function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = optional(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `expected a whole number, got ${JSON.stringify(raw)}`);
  const value = Number(raw);
  if (value < min || value > max)
    throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

/** A TCP port; 0 picks a free one. */
export function port(env: Env, name: string, fallback: number): number {
  return integer(env, name, fallback, 0, 65_535);
}

/** A TCP port, or undefined when unset. */
export function optionalPort(env: Env, name: string): number | undefined {
  return optional(env, name) === undefined ? undefined : port(env, name, 0);
}

/** One of a fixed set of words. */
export function oneOf<const T extends readonly string[]>(
  env: Env,
  name: string,
  allowed: T,
  fallback: T[number],
): T[number] {
  const raw = optional(env, name);
  if (raw === undefined) return fallback;
  if (!allowed.includes(raw))
    throw new ConfigError(name, `must be one of ${allowed.join(", ")}, got ${JSON.stringify(raw)}`);
  return raw as T[number];
}

const ON_OFF = ["on", "off"] as const;

/** A switch: `on` or `off`. */
export function onOff(env: Env, name: string, fallback: "on" | "off"): boolean {
  return oneOf(env, name, ON_OFF, fallback) === "on";
}

/** A secret token of at least `minLength` characters; undefined when unset. */
export function token(env: Env, name: string, minLength: number): string | undefined {
  const value = optional(env, name);
  if (value !== undefined && value.length < minLength) {
    throw new ConfigError(name, `must be at least ${minLength} characters`);
  }
  return value;
}

/** A dollar amount ("25", "0.05") in micro-dollars; `none` is no amount at all. */
export function dollars(env: Env, name: string, fallback: string): bigint | undefined {
  const raw = optional(env, name) ?? fallback;
  if (raw === "none") return undefined;
  let amount: bigint;
  try {
    amount = parseDecimalAmount(raw, 6);
  } catch {
    throw new ConfigError(
      name,
      `expected a dollar amount with at most 6 decimals (e.g. 25 or 0.05) or none, got ${JSON.stringify(raw)}`,
    );
  }
  if (amount === 0n) throw new ConfigError(name, "must be above 0 (or none for no cap)");
  return amount;
}

/** What a URL variable accepts. */
export interface UrlRule {
  /** The schemes accepted, with their colon; http: and https: when absent. */
  readonly schemes?: readonly string[];
  /** What a value of another scheme (or, for an origin, with a path) is told. */
  readonly problem?: string;
  /** The URL's shape, shown when the value is not a URL at all; else the value is quoted. */
  readonly shape?: string;
  /** An origin only: scheme, host and port, no path. */
  readonly origin?: boolean;
  /**
   * The host may be empty after credentials (`postgres://user:pw@/db?host=/var/run/postgresql`,
   * libpq's form for a Unix socket, which WHATWG URLs refuse): checked as if it were `localhost`.
   */
  readonly emptyHost?: boolean;
}

/** A URL variable: the value as set and parsed, or undefined when unset. Every URL is read here. */
export function url(env: Env, name: string, rule: UrlRule = {}): { raw: string; url: URL } | undefined {
  const { schemes = ["http:", "https:"], problem = "must be an http:// or https:// URL" } = rule;
  const raw = optional(env, name);
  if (raw === undefined) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(
      rule.emptyHost === true
        ? raw.replace(/^([a-z][a-z0-9+.-]*:\/\/[^/?#]*@)(?=[/?#]|$)/i, "$1localhost")
        : raw,
    );
  } catch {
    throw new ConfigError(
      name,
      rule.shape === undefined ? `not a URL: ${JSON.stringify(raw)}` : `not a URL (${rule.shape})`,
    );
  }
  if (!schemes.includes(parsed.protocol)) throw new ConfigError(name, problem);
  if (rule.origin === true && parsed.pathname !== "/") throw new ConfigError(name, problem);
  return { raw, url: parsed };
}

/**
 * A URL as it was set, its password replaced by `***`, for output (ready lines, messages): the
 * rest as written, so a form WHATWG URLs refuse (libpq's empty host before `?host=`) prints too.
 */
export function maskedUrl(raw: string): string {
  return raw.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/?#@]*):[^/?#]+@/i, "$1:***@");
}

/** A JSON file named by the variable (relative to `cwd`), read and validated by `parse`; undefined when unset. */
export function jsonFile<T>(env: Env, cwd: string, name: string, parse: (json: unknown) => T): T | undefined {
  const raw = optional(env, name);
  if (raw === undefined) return undefined;
  const path = resolve(cwd, raw);
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new ConfigError(name, `cannot read ${path}: ${(error as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(name, `${path} is not valid JSON: ${(error as Error).message}`);
  }
  try {
    return parse(json);
  } catch (error) {
    throw new ConfigError(name, `${path}: ${(error as Error).message}`);
  }
}
