/**
 * `tollgate serve` runs with its own V8 semi-space (src/cli/semi-space.ts, docs/performance.md
 * §21): the compiled CLI (dist/) re-runs itself in a child node with `--max-semi-space-size=32`
 * unless the operator chose a size; SIGTERM reaches the child and drains it; a launcher killed
 * outright (SIGKILL) takes the child with it, as a crash.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { semiSpaceFlags } from "../../src/cli/semi-space.js";
import { ConfigError } from "../../src/config/config.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { writeChainsFile } from "../helpers/evm.js";
import { startGateway, tempDir } from "../helpers/process.js";

describe("semiSpaceFlags", () => {
  it("asks for 32 MiB by default, the operator's size when TOLLGATE_SEMI_SPACE_MB names one, none when off", () => {
    expect(semiSpaceFlags({}, [])).toEqual(["--max-semi-space-size=32"]);
    expect(semiSpaceFlags({ TOLLGATE_SEMI_SPACE_MB: "64" }, [])).toEqual(["--max-semi-space-size=64"]);
    expect(semiSpaceFlags({ TOLLGATE_SEMI_SPACE_MB: "off" }, [])).toBeUndefined();
  });

  it("leaves a size the operator gave node alone, and never re-runs the re-run process", () => {
    expect(semiSpaceFlags({ NODE_OPTIONS: "--max-semi-space-size=8" }, [])).toBeUndefined();
    expect(semiSpaceFlags({ NODE_OPTIONS: "--enable-source-maps" }, [])).toEqual([
      "--max-semi-space-size=32",
    ]);
    expect(semiSpaceFlags({}, ["--max_semi_space_size=8"])).toBeUndefined();
    expect(semiSpaceFlags({ TOLLGATE_SEMI_SPACE_LAUNCHED: "1" }, [])).toBeUndefined();
  });

  it("refuses a size that is not a whole number of MiB, naming the variable", () => {
    for (const bad of ["32MB", "0", "-1", "1.5", "99999"])
      expect(() => semiSpaceFlags({ TOLLGATE_SEMI_SPACE_MB: bad }, [])).toThrow(ConfigError);
    expect(() => semiSpaceFlags({ TOLLGATE_SEMI_SPACE_MB: "lots" }, [])).toThrow(/TOLLGATE_SEMI_SPACE_MB/);
  });
});

describe("tollgate serve's launcher (compiled CLI)", () => {
  let chain: EvmDevChain;
  let upstream: DevUpstream;
  const dirs: { cleanup(): void }[] = [];
  let env: Record<string, string>;

  beforeAll(async () => {
    chain = await startEvmDevChain({ id: "base", chainId: 8453 });
    upstream = await startDevUpstream();
    const dir = tempDir();
    dirs.push(dir);
    const chainsFile = join(dir.path, "chains.json");
    writeChainsFile(chainsFile, chain);
    env = {
      TOLLGATE_ANTHROPIC_URL: upstream.url,
      TOLLGATE_CHAINS: chainsFile,
      TOLLGATE_DEV_CHAINS: "auto",
      TOLLGATE_MASTER_SECRET: "5e".repeat(32),
    };
  }, 60_000);

  afterAll(async () => {
    await upstream?.close();
    await chain?.close();
    for (const dir of dirs) dir.cleanup();
  });

  const dataDir = () => {
    const dir = tempDir();
    dirs.push(dir);
    return dir.path;
  };
  /** The pids of a process's children (Linux). */
  const childrenOf = (pid: number) =>
    readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(" ").filter(Boolean).map(Number);
  const cmdline = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");

  it("serves from a child node with --max-semi-space-size=32, drained by a SIGTERM to the launcher", async () => {
    const gateway = await startGateway({ ...env, TOLLGATE_DATA_DIR: dataDir() }, 30_000, "serve");
    const [server, ...more] = childrenOf(gateway.child.pid!);
    expect(more).toEqual([]);
    expect(cmdline(server!)).toContain("--max-semi-space-size=32");
    expect((await fetch(`${gateway.facadeUrl}/v1/health`)).status).toBe(200);
    expect(await gateway.stop("SIGTERM")).toBe(0);
    expect(existsSync(`/proc/${server}`)).toBe(false);
  }, 60_000);

  it("takes its child with it when killed outright (SIGKILL): no orphan left serving", async () => {
    const gateway = await startGateway({ ...env, TOLLGATE_DATA_DIR: dataDir() }, 30_000, "serve");
    const [server] = childrenOf(gateway.child.pid!);
    expect(server).toBeDefined();
    try {
      await gateway.stop("SIGKILL");
      const deadline = Date.now() + 5_000;
      while (existsSync(`/proc/${server}`) && Date.now() < deadline) await sleep(20);
      expect(existsSync(`/proc/${server}`)).toBe(false);
      await expect(fetch(`${gateway.facadeUrl}/v1/health`)).rejects.toThrow();
    } finally {
      // Should the guard fail, the orphan is not left running after the test.
      if (existsSync(`/proc/${server}`)) process.kill(server!, "SIGKILL");
    }
  }, 60_000);

  it("runs in one process when the operator set a size (NODE_OPTIONS) or TOLLGATE_SEMI_SPACE_MB=off", async () => {
    const settings: Record<string, string>[] = [
      { NODE_OPTIONS: "--max-semi-space-size=16" },
      { TOLLGATE_SEMI_SPACE_MB: "off" },
    ];
    for (const extra of settings) {
      const gateway = await startGateway({ ...env, ...extra, TOLLGATE_DATA_DIR: dataDir() }, 30_000, "serve");
      expect(childrenOf(gateway.child.pid!)).toEqual([]);
      expect(await gateway.stop("SIGTERM")).toBe(0);
    }
  }, 60_000);
});
