import {
  type Address,
  createPublicClient,
  getAddress,
  type Hash,
  http,
  type PublicClient,
  zeroAddress,
} from "viem";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import type { Db } from "../../src/store/sqlite/database.js";

/** One token Transfer log, as the chain recorded it. */
export interface TokenMove {
  readonly txHash: string;
  readonly logIndex: number;
  readonly block: bigint;
  readonly from: Address;
  readonly to: Address;
  readonly value: bigint;
}

/** What the client was told is done: the loop's record, checked against the ledger after every restart. */
export interface Acknowledged {
  /** Calls whose response the client fully received, by the gateway's request id: their charge. */
  readonly calls: Map<string, bigint>;
  /** Withdrawals the client got an answer for, by transfer id. */
  readonly withdrawals: Map<string, { readonly amount: bigint; readonly to: string }>;
  /** Deposits the client saw credited, by `txHash#logIndex`: their amount. */
  readonly deposits: Map<string, bigint>;
}

/**
 * Reads the test stablecoin's Transfer logs from the dev chain, incrementally (anvil never
 * reorganises here), and balances at the block the logs were read to.
 */
export class ChainReader {
  readonly moves: TokenMove[] = [];
  private readonly client: PublicClient;
  private next = 0n;
  /** The block the logs were last read to (balances are read there too). */
  head = 0n;

  constructor(
    rpcUrl: string,
    private readonly token: Address,
  ) {
    this.client = createPublicClient({ transport: http(rpcUrl) });
  }

  /**
   * Reads the logs of every block mined since the last refresh, up to the one before the newest:
   * anvil may answer the newest block's number before its logs can be read. A confirmed transfer
   * or a credited deposit (one confirmation) is always in a block that has a successor.
   */
  async refresh(): Promise<void> {
    const head = (await this.client.getBlockNumber({ cacheTime: 0 })) - 1n;
    if (head >= this.next) {
      const logs = await this.client.getContractEvents({
        address: this.token,
        abi: eip3009Abi,
        eventName: "Transfer",
        fromBlock: this.next,
        toBlock: head,
        strict: true,
      });
      for (const log of logs) {
        this.moves.push({
          txHash: log.transactionHash.toLowerCase(),
          logIndex: log.logIndex,
          block: log.blockNumber,
          from: getAddress(log.args.from),
          to: getAddress(log.args.to),
          value: log.args.value,
        });
      }
      this.next = head + 1n;
    }
    this.head = head;
  }

  /** The index of the first log of a mined transaction (a mint has exactly one). */
  async firstLogIndex(hash: Hash): Promise<number> {
    const receipt = await this.client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    return receipt.logs[0]!.logIndex;
  }

  /** The token balance of `address` at the block the logs were read to. */
  balanceAtHead(address: string): Promise<bigint> {
    return this.client.readContract({
      address: this.token,
      abi: eip3009Abi,
      functionName: "balanceOf",
      args: [getAddress(address)],
      blockNumber: this.head,
    });
  }
}

interface TransferRecord {
  id: string;
  kind: "settlement" | "withdrawal";
  account_id: string;
  to_address: string;
  amount: bigint;
  status: string;
  tx_hash: string | null;
}

/**
 * The chain against the ledger: every token that left a deposit address left in a transaction
 * the ledger recorded for that transfer (its amount, its recipient), at most once per transfer
 * and exactly once per confirmed one; every deposit the watcher passed (below its cursor) is
 * credited once, for its amount, and nothing else is; no account's deposit address paid out more
 * than the ledger committed (`exact`: once every transfer is confirmed, exactly what its
 * transfers move); and the balances the chain reports agree with its logs. Returns every
 * violation found.
 *
 * The chain worker runs meanwhile, so the ledger is read before the chain and again after:
 * what the ledger had confirmed or credited before must be on the chain, and what the chain
 * shows must be recorded in the ledger after (a transaction is recorded before it is sent).
 */
export async function checkChainAgainstLedger(
  db: Db,
  chain: ChainReader,
  treasury: string,
  exact: boolean,
): Promise<string[]> {
  const before = readChainTables(db);
  await chain.refresh();
  const after = readChainTables(db);
  const { addresses } = after;
  const problems: string[] = [];
  const byTx = new Map(
    after.transfers.filter((t) => t.tx_hash !== null).map((t) => [t.tx_hash!.toLowerCase(), t]),
  );
  const paid = new Map<string, number>();
  const outgoing = new Map<string, bigint>();
  const mints = new Map<string, { account: string; value: bigint; block: bigint }>();
  const net = new Map<string, bigint>();
  const add = (address: string, value: bigint) => net.set(address, (net.get(address) ?? 0n) + value);
  for (const move of chain.moves) {
    add(move.to, move.value);
    if (move.from !== zeroAddress) add(move.from, -move.value);
    const recipient = addresses.get(move.to);
    if (move.from === zeroAddress && recipient !== undefined) {
      mints.set(`${move.txHash}#${move.logIndex}`, {
        account: recipient,
        value: move.value,
        block: move.block,
      });
    }
    const payer = addresses.get(move.from);
    if (payer === undefined) continue;
    outgoing.set(payer, (outgoing.get(payer) ?? 0n) + move.value);
    const transfer = byTx.get(move.txHash);
    if (transfer === undefined) {
      problems.push(
        `tx ${move.txHash} moved ${move.value} out of ${payer}'s deposit address, and no transfer of the ledger names it (paid twice?)`,
      );
      continue;
    }
    paid.set(transfer.id, (paid.get(transfer.id) ?? 0) + 1);
    if (
      transfer.account_id !== payer ||
      transfer.amount !== move.value ||
      getAddress(transfer.to_address) !== move.to
    ) {
      problems.push(
        `${transfer.kind} ${transfer.id}: the ledger says ${transfer.amount} from ${transfer.account_id} to ${transfer.to_address}, the chain moved ${move.value} from ${payer} to ${move.to}`,
      );
    }
  }
  for (const transfer of after.transfers) {
    const times = paid.get(transfer.id) ?? 0;
    if (times > 1) problems.push(`${transfer.kind} ${transfer.id} paid ${times} times onchain`);
    if (transfer.kind === "settlement" && getAddress(transfer.to_address) !== getAddress(treasury))
      problems.push(`settlement ${transfer.id} pays ${transfer.to_address}, not the treasury`);
  }
  for (const transfer of before.transfers) {
    const times = paid.get(transfer.id) ?? 0;
    if (transfer.status === "confirmed" && times !== 1)
      problems.push(`${transfer.kind} ${transfer.id} is confirmed, the chain shows it paid ${times} times`);
    if (exact && transfer.status !== "confirmed")
      problems.push(`${transfer.kind} ${transfer.id} still ${transfer.status}`);
  }
  for (const deposit of before.deposits) {
    const key = `${deposit.tx_hash.toLowerCase()}#${deposit.log_index}`;
    const mint = mints.get(key);
    if (mint === undefined || mint.account !== deposit.account_id || mint.value !== deposit.amount)
      problems.push(
        `deposit ${key} credited ${deposit.amount} to ${deposit.account_id}; the chain has ${mint === undefined ? "no such transfer" : `${mint.value} to ${mint.account}`}`,
      );
  }
  const credited = new Set(before.deposits.map((d) => `${d.tx_hash.toLowerCase()}#${d.log_index}`));
  for (const [key, mint] of mints) {
    if (before.cursor !== undefined && mint.block < before.cursor && !credited.has(key))
      problems.push(`deposit ${key} of ${mint.value} to ${mint.account} was scanned but never credited`);
  }
  for (const [account, moved] of outgoing) {
    const owed = after.committed.get(account) ?? 0n;
    if (moved > owed)
      problems.push(`${account}'s deposit address paid out ${moved}, the ledger committed ${owed}`);
  }
  if (exact) {
    const transferred = new Map<string, bigint>();
    for (const t of after.transfers)
      transferred.set(t.account_id, (transferred.get(t.account_id) ?? 0n) + t.amount);
    for (const [account, amount] of transferred) {
      const moved = outgoing.get(account) ?? 0n;
      if (moved !== amount)
        problems.push(`${account}'s deposit address paid out ${moved}, its transfers total ${amount}`);
    }
  }
  for (const address of [getAddress(treasury), ...addresses.keys()]) {
    const balance = await chain.balanceAtHead(address);
    if (balance !== (net.get(address) ?? 0n))
      problems.push(`${address} holds ${balance}, its Transfer logs give ${net.get(address) ?? 0n}`);
  }
  return problems;
}

/** The onchain tables the comparison reads, in one snapshot. */
function readChainTables(db: Db) {
  return db.transaction(() => {
    const addresses = new Map(
      (
        db.prepare("SELECT address, account_id FROM deposit_addresses WHERE family = 'evm'").all() as {
          address: string;
          account_id: string;
        }[]
      ).map((r) => [getAddress(r.address), r.account_id]),
    );
    const transfers = db
      .prepare("SELECT id, kind, account_id, to_address, amount, status, tx_hash FROM chain_transfers")
      .safeIntegers(true)
      .all() as TransferRecord[];
    const deposits = db
      .prepare("SELECT tx_hash, log_index, account_id, amount FROM deposits WHERE chain = 'base'")
      .safeIntegers(true)
      .all()
      .map((r) => {
        const row = r as { tx_hash: string; log_index: bigint; account_id: string; amount: bigint };
        return { ...row, log_index: Number(row.log_index) };
      });
    const committed = new Map(
      (
        db
          .prepare("SELECT account_id, committed FROM onchain_backing WHERE chain = 'base'")
          .safeIntegers(true)
          .all() as { account_id: string; committed: bigint }[]
      ).map((r) => [r.account_id, r.committed]),
    );
    const cursor = (
      db.prepare("SELECT next_position FROM chain_cursors WHERE chain = 'base'").safeIntegers(true).get() as
        | { next_position: bigint }
        | undefined
    )?.next_position;
    return { addresses, transfers, deposits, committed, cursor };
  })();
}

/**
 * What the client was told, against the ledger: every acknowledged call settled for exactly its
 * charge, every acknowledged withdrawal recorded with its amount and recipient, every deposit the
 * client saw credited still credited for its amount; and no call anywhere charged above its hold.
 */
export function checkAcknowledged(db: Db, acked: Acknowledged): string[] {
  const problems: string[] = [];
  const call = db
    .prepare(
      `SELECT h.amount AS held, r.status, r.amount AS charged
         FROM holds h LEFT JOIN hold_resolutions r ON r.hold_id = h.id WHERE h.request_id = ?`,
    )
    .safeIntegers(true);
  for (const [requestId, charge] of acked.calls) {
    const row = call.get(requestId) as { held: bigint; status: string | null; charged: bigint } | undefined;
    if (row?.status !== "settled" || row.charged !== charge)
      problems.push(
        `call ${requestId} was answered in full for ${charge}; the ledger has ${row === undefined ? "no hold" : `${row.status ?? "pending"} ${row.charged ?? ""}`}`,
      );
  }
  const withdrawal = db
    .prepare("SELECT amount, to_address FROM chain_transfers WHERE id = ? AND kind = 'withdrawal'")
    .safeIntegers(true);
  for (const [id, want] of acked.withdrawals) {
    const row = withdrawal.get(id) as { amount: bigint; to_address: string } | undefined;
    if (row?.amount !== want.amount || getAddress(row.to_address) !== getAddress(want.to))
      problems.push(
        `withdrawal ${id} of ${want.amount} to ${want.to} was acknowledged; the ledger has ${row?.amount}`,
      );
  }
  const deposit = db
    .prepare("SELECT amount FROM deposits WHERE chain = 'base' AND lower(tx_hash) = ? AND log_index = ?")
    .safeIntegers(true);
  for (const [key, amount] of acked.deposits) {
    const [txHash, logIndex] = key.split("#");
    const row = deposit.get(txHash, Number(logIndex)) as { amount: bigint } | undefined;
    if (row?.amount !== amount)
      problems.push(`deposit ${key} was seen credited ${amount}; the ledger has ${row?.amount}`);
  }
  const above = db
    .prepare(
      `SELECT h.id, h.amount AS held, r.amount AS charged FROM holds h JOIN hold_resolutions r ON r.hold_id = h.id
        WHERE r.amount > h.amount`,
    )
    .safeIntegers(true)
    .all() as { id: string; held: bigint; charged: bigint }[];
  for (const row of above) problems.push(`hold ${row.id} charged ${row.charged} above its hold ${row.held}`);
  return problems;
}

/** Holds not yet resolved (the sweeper voids a killed call's once it is older than the longest call). */
export function openHolds(db: Db): number {
  return (db.prepare("SELECT count(*) AS n FROM open_holds").get() as { n: number }).n;
}
