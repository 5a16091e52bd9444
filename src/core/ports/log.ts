/**
 * The log port: where the core reports what an operator must see (failures masked from the
 * caller, anomalies in what it charged). The runtime implements it with the gateway's pino
 * logger, so every line is one JSON object carrying the fields given here; a pino logger fits
 * this interface as it is.
 */

/** What a log line says beyond its message. */
export interface LogFields {
  /** The request the line is about (the facade's `x-request-id`), when there is one. */
  readonly requestId?: string | undefined;
  /** The failure behind the line, serialised with its message and stack. */
  readonly err?: unknown;
  readonly [field: string]: unknown;
}

/** A structured logger: one line per call, at the level named. */
export interface Log {
  error(fields: LogFields, message: string): void;
  warn(fields: LogFields, message: string): void;
  info(fields: LogFields, message: string): void;
}

/** Discards everything: the core's logger when none is given (tests, tools). */
export const silentLog: Log = {
  error: () => {},
  warn: () => {},
  info: () => {},
};
