import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { resolve } from "node:path";

const WORKER = resolve(import.meta.dirname, "children/billing-process.mjs");
const DIST = resolve(import.meta.dirname, "../../dist/src/core/billing/billing.js");

/** Fails with a clear hint when the compiled dist/ the child processes import is missing. */
export function requireBuild(): void {
  if (!existsSync(DIST)) throw new Error("dist/ is not built: run `npx tsc -p tsconfig.build.json` first");
}

/** What a billing process reports when its job is done. */
export interface WorkerCounts {
  readonly held: number;
  readonly insufficient: number;
  readonly settled: number;
  readonly charged: string;
}

/** A billing process, started and waiting for `go()`. */
export interface Worker {
  readonly child: ChildProcess;
  /** With `acks`: every hold and settlement the process was told is durable, as it was told. */
  readonly acks: { readonly held: string[]; readonly settled: Map<string, bigint> };
  /** Starts the job; resolves with the worker's counts once it prints them. */
  go(): Promise<WorkerCounts>;
  /** Resolves with the exit code or signal once the process has exited. */
  readonly exited: Promise<number | NodeJS.Signals | null>;
}

/**
 * Spawns a billing process on `dataDir` (its ledger writes in a writer thread, as a gateway
 * runs them) and resolves once it is ready. `concurrency`: calls in flight at once (1 when
 * absent); `acks`: report each acknowledged hold and settlement as it happens.
 */
export function startWorker(job: {
  dataDir: string;
  accountId: string;
  prefix: string;
  attempts: number;
  mode: "hold" | "cycle" | "hang";
  concurrency?: number;
  acks?: boolean;
}): Promise<Worker> {
  const child = spawn(process.execPath, [WORKER, JSON.stringify(job)], { stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stderr!.on("data", (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise<number | NodeJS.Signals | null>((done) =>
    child.on("exit", (code, signal) => done(signal ?? code)),
  );
  const lines: ((line: string) => void)[] = [];
  const acks = { held: [] as string[], settled: new Map<string, bigint>() };
  child.stdout!.on("data", (chunk) => {
    stdout += chunk;
    let newline = stdout.indexOf("\n");
    while (newline >= 0) {
      const line = stdout.slice(0, newline);
      stdout = stdout.slice(newline + 1);
      const [kind, id, charge] = line.split(" ");
      if (kind === "held") acks.held.push(id!);
      else if (kind === "settled") acks.settled.set(id!, BigInt(charge!));
      else lines.shift()?.(line);
      newline = stdout.indexOf("\n");
    }
  });
  const nextLine = () =>
    new Promise<string>((resolveLine, reject) => {
      lines.push(resolveLine);
      void exited.then((code) => reject(new Error(`worker exited (${code}): ${stderr}`)));
    });
  return nextLine().then(() => ({
    child,
    acks,
    exited,
    go: async () => {
      const result = nextLine();
      // Ending stdin also lets the worker exit once done.
      child.stdin!.end("go\n");
      return JSON.parse(await result) as WorkerCounts;
    },
  }));
}
