import { type Client, createClient } from "@connectrpc/connect";
import { loadConfig } from "../../src/config/config.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { openRuntime, type Runtime } from "../../src/runtime/runtime.js";
import { type Db, openDatabase } from "../../src/store/sqlite/database.js";
import { tempDir } from "./process.js";

/** A gateway built in this process and listening on ephemeral ports, over its own data dir. */
export interface TestGateway {
  readonly app: Runtime;
  readonly facadeUrl: string;
  readonly coreUrl: string;
  /** The operator's typed client over the same database (what the CLI uses). */
  readonly operator: Client<typeof AuthService>;
  /**
   * A connection of the test's own to the gateway's SQLite file, for white-box reads and audits
   * (the runtime hands out no database handle).
   */
  readonly db: Db;
  /** Shuts the gateway down and removes its data dir. */
  close(): Promise<void>;
  /** Removes the data dir only, for a test that shut the gateway down itself. */
  removeData(): void;
}

/**
 * Builds and starts a gateway with a fresh data dir; `env` adds TOLLGATE_* settings and
 * `beforeListen` may add test-only routes.
 */
export async function startTestGateway(
  env: Record<string, string> = {},
  beforeListen: (app: Runtime) => void = () => {},
): Promise<TestGateway> {
  const dir = tempDir();
  const config = loadConfig({
    TOLLGATE_DATA_DIR: dir.path,
    TOLLGATE_PORT: "0",
    TOLLGATE_CORE_PORT: "0",
    ...env,
  });
  const app = await openRuntime(config, { mode: "embedded" });
  beforeListen(app);
  const facadeUrl = await app.facade!.listen({ host: "127.0.0.1", port: 0 });
  const coreUrl = await app.core!.server.listen({ host: "127.0.0.1", port: 0 });
  // The CLI's way in: an operator runtime over the same data dir.
  const operatorRuntime = await openRuntime(config, { mode: "operator" });
  const operator = createClient(AuthService, operatorRuntime.transport!);
  const db = openDatabase(dir.path);
  return {
    app,
    facadeUrl,
    coreUrl,
    operator,
    db,
    close: async () => {
      db.close();
      await operatorRuntime.close();
      await app.close(2_000);
      dir.cleanup();
    },
    removeData: dir.cleanup,
  };
}

/** Creates an account with one key through the operator client. */
export async function accountWithKey(operator: Client<typeof AuthService>, name = "test") {
  const { account } = await operator.createAccount({ name });
  const { key, secret } = await operator.createKey({ accountId: account!.id, name: `${name}-key` });
  return { accountId: account!.id, keyId: key!.id, secret };
}
