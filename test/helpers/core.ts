import { walletSignatures } from "../../src/chains/wallet-signatures.js";
import { type Core, type CoreDeps, createCore } from "../../src/core/core.js";
import { AuthRepository } from "../../src/store/sqlite/accounts.js";
import type { Db } from "../../src/store/sqlite/database.js";
import { groupCommittedWrites, SqliteLedger } from "../../src/store/sqlite/ledger-store.js";
import { SessionRepository } from "../../src/store/sqlite/sessions.js";

/** Everything a core takes besides its stores. */
export type CoreOptions = Omit<CoreDeps, "accounts" | "sessions" | "ledger" | "onchain" | "wallets"> &
  Partial<Pick<CoreDeps, "wallets">>;

/**
 * A core over the SQLite stores of an open database, its ledger writes group-committed on this
 * thread (as the CLI runs it): the same core a gateway builds, minus the writer thread.
 */
export function coreOver(db: Db, options: CoreOptions = {}): Core {
  const ledger = new SqliteLedger(db, groupCommittedWrites(db));
  return createCore({
    wallets: walletSignatures(),
    ...options,
    accounts: new AuthRepository(db),
    sessions: new SessionRepository(db),
    ledger,
    onchain: ledger,
  });
}
