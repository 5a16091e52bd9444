import { join } from "node:path";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { writeChainsFile } from "../helpers/evm.js";
import { type Cleanups, cleanUp, cliAccount, cliCredit, messagesCall, startHost } from "../helpers/hosts.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import { tempDir } from "../helpers/process.js";

// A host on PostgreSQL's own machine reaches it through its Unix socket, in libpq's URL form
// with an empty host (`postgres://user:password@/database?host=<socket dir>&port=<port>`), which
// WHATWG URLs refuse: the host starts on it, names it in its ready line with the password masked,
// and bills a call (docs/deployment.md, "PostgreSQL on the same machine").

let postgres: PostgresServer;
let chain: EvmDevChain;
let upstream: DevUpstream;
let chainsFile: string;
const suiteDir = tempDir();

beforeAll(async () => {
  [postgres, chain, upstream] = await Promise.all([
    startPostgres(),
    startEvmDevChain({ id: "base", chainId: 8453 }),
    startDevUpstream({ host: "127.0.0.1", port: 0 }),
  ]);
  chainsFile = join(suiteDir.path, "chains.json");
  writeChainsFile(chainsFile, chain);
}, 60_000);
afterAll(async () => {
  await Promise.all([postgres?.stop(), chain?.close(), upstream?.close()]);
  suiteDir.cleanup();
});

const cleanups: Cleanups = [];
afterEach(() => cleanUp(cleanups));

describe("a host on PostgreSQL's Unix socket", () => {
  it("starts on libpq's empty-host URL, masks its password, and bills a call", async () => {
    const tcp = await postgres.freshDatabase();
    const socket = new URL(postgres.socketUrl(tcp));
    const database = socket.pathname.slice(1);
    const url = `postgres://tollgate:${socket.password}@/${database}?host=${socket.searchParams.get("host")}&port=${socket.port}`;
    const env = {
      TOLLGATE_DATABASE_URL: url,
      TOLLGATE_ANTHROPIC_URL: upstream.url,
      TOLLGATE_CHAINS: chainsFile,
      TOLLGATE_DEV_CHAINS: "auto",
      TOLLGATE_MASTER_SECRET: "4e".repeat(32),
    };
    const host = await startHost(env, cleanups);
    expect(host.stdout()).toContain(`store: postgres ${url.replace(socket.password, "***")}`);
    expect(host.stdout()).not.toContain(socket.password);

    const caller = await cliAccount(env, cleanups, "socket");
    await cliCredit(caller.cli, caller.id, "5", "calls");
    const result = await messagesCall(host, caller.secret, "claude-haiku-4-5", "over the socket", false);
    expect(result.status).toBe(200);

    // The hosts' connections came over the socket (no client address), and the call was billed.
    const pool = new pg.Pool({ connectionString: tcp, max: 1 });
    cleanups.push(() => pool.end());
    const { rows } = await pool.query<{ n: string }>(
      "SELECT COUNT(*)::text AS n FROM pg_stat_activity WHERE datname = $1 AND client_addr IS NULL AND backend_type = 'client backend'",
      [database],
    );
    expect(Number(rows[0]!.n)).toBeGreaterThan(0);
    const settled = await pool.query(
      "SELECT 1 FROM hold_resolutions WHERE status = 'settled' AND amount > 0",
    );
    expect(settled.rowCount).toBe(1);
    expect(await auditPostgres(pool)).toEqual([]);
  }, 60_000);
});
