/**
 * Small readers for hand-written JSON config files. Each failure names the JSON path, so the
 * config error can say exactly which entry of which file is wrong.
 */

/** A JSON object, or a failure naming `path`. */
export function readObject(value: unknown, path: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`${path} must be an object`);
  }
  return value as Record<string, unknown>;
}

/** A JSON array, or a failure naming `path`. */
export function readArray(value: unknown, path: string): unknown[] {
  if (!Array.isArray(value)) throw new Error(`${path} must be an array`);
  return value;
}

/** A string field; `fallback` makes it optional. */
export function readString(
  obj: Record<string, unknown>,
  key: string,
  path: string,
  fallback?: string,
): string {
  const value = obj[key];
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== "string") throw new Error(`${path}.${key} must be a string`);
  return value;
}

/** A boolean field; `fallback` makes it optional. */
export function readBoolean(
  obj: Record<string, unknown>,
  key: string,
  path: string,
  fallback?: boolean,
): boolean {
  const value = obj[key];
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== "boolean") throw new Error(`${path}.${key} must be true or false`);
  return value;
}

/** A whole-number field within [min, max]. */
export function readInteger(
  obj: Record<string, unknown>,
  key: string,
  path: string,
  min: number,
  max: number,
): number {
  const value = obj[key];
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new Error(`${path}.${key} must be a whole number between ${min} and ${max}`);
  }
  return value;
}

/**
 * A non-negative integer money field, exact: a JSON number only while it is a safe integer
 * (larger numbers were already rounded by JSON.parse), else a string of digits.
 */
export function readMoney(obj: Record<string, unknown>, key: string, path: string): bigint {
  const value = obj[key];
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return BigInt(value);
  if (typeof value === "string" && /^\d{1,18}$/.test(value)) return BigInt(value);
  throw new Error(`${path}.${key} must be a whole number of micro-dollars (≥ 0; as a string above 2^53)`);
}

/** Fails when `obj` has a key outside `allowed`, so a typo is never silently ignored. */
export function rejectUnknownKeys(
  obj: Record<string, unknown>,
  allowed: readonly string[],
  path: string,
): void {
  for (const key of Object.keys(obj)) {
    if (!allowed.includes(key)) throw new Error(`${path} has an unknown field ${JSON.stringify(key)}`);
  }
}
