import { parseArgs } from "node:util";
import { UsageError } from "../../cli/command.js";
import { type DevUpstream, startDevUpstream } from "../provider/dev-upstream.js";

/** Default address of `tollgate dev-upstream`: next to the gateway's 8787/8788. */
const DEFAULT_HOST = "127.0.0.1";
const DEFAULT_PORT = 8789;

/**
 * Runs `tollgate dev-upstream [--host H] [--port P] [--api-key K]`: starts the local stand-in
 * provider, prints one ready line, and closes it on SIGTERM or SIGINT. Resolves once listening.
 */
export async function runDevUpstream(args: readonly string[]): Promise<DevUpstream> {
  let values: { host?: string; port?: string; "api-key"?: string };
  try {
    ({ values } = parseArgs({
      args: [...args],
      options: { host: { type: "string" }, port: { type: "string" }, "api-key": { type: "string" } },
      allowPositionals: false,
      strict: true,
    }));
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const host = values.host ?? DEFAULT_HOST;
  if (host === "") throw new UsageError("--host must not be empty");
  const port = parsePort(values.port);
  const apiKey = values["api-key"];
  if (apiKey === "") throw new UsageError("--api-key must not be empty");

  const upstream = await startDevUpstream({ host, port, apiKey });
  let stopping = false;
  const onSignal = () => {
    if (stopping) return;
    stopping = true;
    void upstream.close().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error("tollgate dev-upstream: shutdown failed:", error);
        process.exit(1);
      },
    );
  };
  // Before the ready line: whoever reads it may signal at once.
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  process.stdout.write(
    `tollgate dev-upstream ready: ${upstream.url} ` +
      "(a local stand-in that speaks the Anthropic wire format with generated, labelled text, and the " +
      "Gemini and OpenAI image formats with generated, labelled images; not a model)\n",
  );
  return upstream;
}

function parsePort(raw: string | undefined): number {
  if (raw === undefined) return DEFAULT_PORT;
  if (!/^\d+$/.test(raw) || Number(raw) > 65_535) {
    throw new UsageError(`--port must be a whole number from 0 to 65535, got ${JSON.stringify(raw)}`);
  }
  return Number(raw);
}
