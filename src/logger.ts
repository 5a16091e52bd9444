import { createRequire } from "node:module";
import type { Logger } from "pino";
import type { Log } from "./core/ports/log.js";

/** The levels TOLLGATE_LOG_LEVEL accepts (pino's). */
export type LogLevel = "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";

const require = createRequire(import.meta.url);

/**
 * The gateway's logger: one JSON object per line on stdout (or `fd`), the level by name
 * (`"level":"info"`, not pino's number, so a line reads without a table), the time in ISO 8601.
 * The facade, the core (through its log port) and the chains worker all log through one of these,
 * so an operator's log pipeline parses every line the same way. pino is loaded at the first
 * logger opened (see {@link lazyLog}).
 */
export function openLogger(level: LogLevel, fd: 1 | 2 = 1): Logger {
  const { pino } = require("pino") as typeof import("pino");
  return pino(
    {
      level,
      formatters: { level: (label) => ({ level: label }) },
      timestamp: pino.stdTimeFunctions.isoTime,
      serializers: { err: (error: unknown) => compactDetails(pino.stdSerializers.err(error as Error)) },
    },
    pino.destination({ dest: fd, sync: true }),
  );
}

/**
 * An error as logged, with a ConnectError's `details` (each a protobuf descriptor and its
 * message: pages of schema) reduced to the detail's type name and value.
 */
function compactDetails(serialized: Record<string, unknown>): Record<string, unknown> {
  const details = serialized.details;
  if (!Array.isArray(details)) return serialized;
  return {
    ...serialized,
    details: details.map((detail: { desc?: { typeName?: string }; type?: string; value?: unknown }) => ({
      type: detail.desc?.typeName ?? detail.type,
      value: detail.value,
    })),
  };
}

/**
 * A log whose logger is opened at its first line: the CLI's commands, which log only when
 * something fails, start without loading pino (about 35 ms).
 */
export function lazyLog(open: () => Logger): Log {
  let logger: Logger | undefined;
  const opened = () => (logger ??= open());
  return {
    error: (fields, message) => opened().error(fields, message),
    warn: (fields, message) => opened().warn(fields, message),
    info: (fields, message) => opened().info(fields, message),
  };
}

/**
 * The chains' logging (ChainsRuntime's `log` and `onError`) on `log`. A chain's failure is logged
 * by the first line of its message only: RPC clients' errors run to dozens of lines, and a
 * failing chain repeats its failure at every poll.
 */
export function chainsLogging(log: Log) {
  return {
    log: (line: string) => log.info({ component: "chains" }, line),
    onError: (error: unknown, context: string) =>
      log.error(
        {
          component: "chains",
          context,
          error: error instanceof Error ? error.message.split("\n")[0] : String(error),
        },
        `${context} failed`,
      ),
  };
}
