import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { Transaction } from "@solana/web3.js";
import QRCode from "qrcode";
import { encodeFunctionData, erc20Abi, getAddress, toHex } from "viem";
import {
  type Chain,
  ChainFamily,
  type DepositAddress,
  TransferStatus,
} from "../../gen/tollgate/billing/v1/billing_pb.js";
import { chainById, chainLedgerDecimals, type PageContext } from "../context.js";
import { copyButton, errorLine, h, loading, messageOf, mount, table } from "../dom.js";
import { dollars, ledgerDecimals, parseDollars } from "../money.js";
import { billing } from "../rpc.js";
import { ethereumAccount, ethereumWallet, solanaWallet } from "../wallets.js";

/** How often the page looks for a deposit it sent, and for how long. */
const POLL_MS = 1_000;
const POLL_FOR_MS = 10 * 60_000;

/**
 * The funding half of the Wallet page: the account's deposit address per chain (QR code, copy),
 * Fund from the connected wallet (followed to a credited balance), deposit history, and
 * withdrawal. `onCredited` redraws the balances.
 */
export async function fundingSection(
  ctx: PageContext,
  onCredited: () => Promise<void>,
): Promise<HTMLElement> {
  const section = h("div", { id: "funding" }, loading("deposit addresses"));
  let addresses: DepositAddress[];
  try {
    addresses = (await billing.getDepositAddresses({})).addresses;
  } catch (error) {
    if (error instanceof ConnectError && error.code === Code.FailedPrecondition) {
      mount(section, h("p", { class: "muted" }, "Onchain funding is not configured on this gateway."));
      return section;
    }
    mount(section, errorLine(error));
    return section;
  }
  const history = h("div", { id: "deposits" });
  const withdrawals = h("div", { id: "withdrawals" });
  const refreshHistory = async () => {
    await Promise.all([drawDeposits(ctx, history), drawWithdrawals(ctx, withdrawals)]);
  };
  mount(
    section,
    addresses.some((a) => a.testFunds)
      ? faucetForm(ctx, addresses, async () => {
          await Promise.all([onCredited(), refreshHistory()]);
        })
      : null,
    h("h2", {}, "Fund"),
    fundForm(addresses, async () => {
      await Promise.all([onCredited(), refreshHistory()]);
    }),
    h("h2", {}, "Deposit addresses"),
    h(
      "p",
      { class: "muted" },
      "Or send the chain's stablecoin to your address from anywhere (an exchange, another wallet).",
    ),
    await addressTable(addresses),
    h("h2", {}, "Deposits"),
    history,
    h("h2", {}, "Withdraw"),
    withdrawForm(ctx, addresses, async () => {
      await Promise.all([onCredited(), refreshHistory()]);
    }),
    withdrawals,
  );
  await refreshHistory();
  return section;
}

async function addressTable(addresses: DepositAddress[]): Promise<HTMLElement> {
  const rows = await Promise.all(
    addresses.map(async ({ chain, address }) => {
      const qr = h("img", {
        class: "qr",
        alt: `QR code of the ${chain?.id} deposit address`,
        src: await QRCode.toDataURL(paymentUri(chain!, address), { margin: 1, width: 160 }),
      });
      return [
        chain?.id ?? "",
        h(
          "div",
          {},
          h("code", { class: "address", "data-deposit-address": chain?.id ?? "" }, address),
          " ",
          copyButton(address),
        ),
        qr,
      ];
    }),
  );
  return table(["Chain", "Address", "Scan"], rows);
}

/** EIP-681 (a token transfer on the chain) or Solana Pay (an SPL transfer of the mint). */
function paymentUri(chain: Chain, address: string): string {
  if (chain.family === ChainFamily.EVM) {
    return `ethereum:${chain.asset?.address}@${chain.evmChainId}/transfer?address=${address}`;
  }
  return `solana:${address}?spl-token=${chain.asset?.address}`;
}

function fundForm(addresses: DepositAddress[], onCredited: () => Promise<void>): HTMLElement {
  const fundable = addresses.filter((a) => a.chain?.enabled);
  const select = h(
    "select",
    { id: "fund-chain" },
    fundable.map((a) =>
      h("option", { value: a.chain!.id }, `${a.chain!.id} (${a.chain!.asset?.symbol ?? ""})`),
    ),
  );
  const amount = h("input", {
    id: "fund-amount",
    inputmode: "decimal",
    placeholder: "10.00",
    required: true,
  });
  const send = h("button", { type: "submit" }, "Fund from my wallet");
  const status = h("p", { role: "status", id: "fund-status" });
  const form = h(
    "form",
    { class: "row" },
    h("label", {}, "Chain", select),
    h("label", {}, "Amount (dollars)", amount),
    send,
  );
  if (fundable.length === 0) send.disabled = true;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const target = fundable.find((a) => a.chain?.id === select.value);
    const chain = target?.chain;
    if (target === undefined || chain === undefined) return;
    const onchainDecimals = chain.asset?.decimals ?? 6;
    const decimals = ledgerDecimals(onchainDecimals);
    const units = parseDollars(amount.value, decimals);
    status.className = "";
    if (units === undefined || units <= 0n) {
      status.className = "error";
      status.textContent = `Enter an amount in dollars, with at most ${decimals} decimals.`;
      return;
    }
    send.disabled = true;
    try {
      const hash =
        chain.family === ChainFamily.EVM
          ? await sendFromEthereumWallet(
              chain,
              target.address,
              units * 10n ** BigInt(onchainDecimals - decimals),
              status,
            )
          : await sendFromSolanaWallet(chain, units, status);
      status.textContent = `Sent (${short(hash)}). Waiting for the chain to confirm it…`;
      await followDeposit(hash, status);
      status.className = "ok";
      status.textContent = `${dollars(units, decimals)} credited on ${chain.id}.`;
      amount.value = "";
      await onCredited();
    } catch (error) {
      status.className = "error";
      status.textContent = messageOf(error);
    } finally {
      send.disabled = false;
    }
  });
  return h(
    "div",
    {},
    h(
      "p",
      {},
      "Send stablecoin from the connected wallet to your deposit address; it is credited once final.",
    ),
    fundable.length === 0 ? errorLine("No chain has a deposit address here.") : null,
    form,
    status,
  );
}

/** An ERC-20 `transfer` to the deposit address through EIP-1193, on the chain's EIP-155 id. */
async function sendFromEthereumWallet(
  chain: Chain,
  to: string,
  amount: bigint,
  status: HTMLElement,
): Promise<string> {
  const wallet = ethereumWallet();
  const from = await ethereumAccount();
  status.textContent = `Asking your wallet to switch to ${chain.id}…`;
  await wallet.request({
    method: "wallet_switchEthereumChain",
    params: [{ chainId: toHex(chain.evmChainId) }],
  });
  status.textContent = "Confirm the transfer in your wallet…";
  return (await wallet.request({
    method: "eth_sendTransaction",
    params: [
      {
        from,
        to: getAddress(chain.asset!.address),
        data: encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [getAddress(to), amount] }),
      },
    ],
  })) as string;
}

/**
 * An SPL `transferChecked` to the deposit address, signed and sent by the Solana wallet: the
 * gateway assembles the transaction (a page has no Solana RPC of its own), the wallet signs it.
 */
async function sendFromSolanaWallet(chain: Chain, units: bigint, status: HTMLElement): Promise<string> {
  const wallet = solanaWallet();
  const { publicKey } = await wallet.connect();
  const { transaction } = await billing.prepareFunding({
    chain: chain.id,
    fromAddress: publicKey.toString(),
    amount: units,
  });
  status.textContent = "Confirm the transfer in your wallet…";
  const { signature } = await wallet.signAndSendTransaction(Transaction.from(transaction));
  return signature;
}

/** Dev chains: mint test stablecoin to the deposit address, then follow it to a credited balance. */
function faucetForm(
  ctx: PageContext,
  addresses: DepositAddress[],
  onCredited: () => Promise<void>,
): HTMLElement {
  const chains = addresses.filter((a) => a.testFunds).map((a) => a.chain!);
  const select = h(
    "select",
    { id: "faucet-chain" },
    chains.map((c) => h("option", { value: c.id }, c.id)),
  );
  const amount = h("input", { id: "faucet-amount", inputmode: "decimal", value: "25" });
  const button = h("button", { type: "submit" }, "Get test funds");
  const status = h("p", { role: "status", id: "faucet-status" });
  const form = h(
    "form",
    { class: "row" },
    h("label", {}, "Chain", select),
    h("label", {}, "Amount (test dollars)", amount),
    button,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const decimals = chainLedgerDecimals(ctx, select.value);
    const units = parseDollars(amount.value, decimals);
    if (units === undefined || units <= 0n) {
      status.className = "error";
      status.textContent = "Enter an amount in dollars.";
      return;
    }
    button.disabled = true;
    status.className = "";
    status.textContent = "Minting test stablecoin to your deposit address…";
    try {
      const { txHash } = await billing.requestTestFunds({ chain: select.value, amount: units });
      status.textContent = `Minted (${short(txHash)}). Waiting for the chain to confirm it…`;
      await followDeposit(txHash, status);
      status.className = "ok";
      status.textContent = `${dollars(units, decimals)} of test funds credited on ${select.value}.`;
      await onCredited();
    } catch (error) {
      status.className = "error";
      status.textContent = messageOf(error);
    } finally {
      button.disabled = false;
    }
  });
  return h(
    "section",
    { class: "panel", id: "faucet" },
    h("h2", {}, "Test funds (dev chains)"),
    h(
      "p",
      { class: "muted" },
      "This gateway runs local dev chains: mint test stablecoin to your deposit address. It is not real money.",
    ),
    form,
    status,
  );
}

/** Polls the account's deposits until the transfer `hash` is credited (or gives up). */
async function followDeposit(hash: string, status: HTMLElement): Promise<void> {
  const until = Date.now() + POLL_FOR_MS;
  while (Date.now() < until) {
    const { deposits } = await billing.listDeposits({});
    const mine = deposits.filter((d) => d.txHash.toLowerCase() === hash.toLowerCase());
    if (mine.some((d) => d.credited)) return;
    if (mine.length > 0) status.textContent = `Seen onchain (${short(hash)}); waiting for finality…`;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  throw new Error(
    `Not credited yet after ${POLL_FOR_MS / 60_000} minutes: it will appear under Deposits once final.`,
  );
}

async function drawDeposits(ctx: PageContext, into: HTMLElement): Promise<void> {
  try {
    const { deposits } = await billing.listDeposits({});
    if (deposits.length === 0) {
      mount(into, h("p", { class: "muted" }, "No deposits yet."));
      return;
    }
    mount(
      into,
      table(
        ["Time", "Chain", "Amount", "State", "Transaction"],
        deposits.map((d) => {
          const chain = chainById(ctx, d.chain);
          const decimals = chain?.asset?.decimals ?? 6;
          return [
            d.at === undefined ? "" : timestampDate(d.at).toLocaleString(),
            d.chain,
            dollars(BigInt(d.onchainAmount), decimals),
            h("span", { "data-deposit-state": d.txHash }, d.credited ? "credited" : "waiting for finality"),
            h("code", { title: d.txHash }, short(d.txHash)),
          ];
        }),
        new Set([2]),
      ),
    );
  } catch (error) {
    mount(into, errorLine(error));
  }
}

/**
 * Withdrawal in two steps: the form names the chain's minimum and network fee and quotes what
 * the user receives and what leaves the balance as they type; Withdraw shows that quote for
 * confirmation, and only Confirm sends it (with one withdrawal id, so a double click withdraws
 * once).
 */
function withdrawForm(
  ctx: PageContext,
  addresses: DepositAddress[],
  onSent: () => Promise<void>,
): HTMLElement {
  const select = h(
    "select",
    { id: "withdraw-chain" },
    addresses.map((a) => h("option", { value: a.chain!.id }, a.chain!.id)),
  );
  const amount = h("input", {
    id: "withdraw-amount",
    inputmode: "decimal",
    placeholder: "5.00",
    required: true,
  });
  const to = h("input", {
    id: "withdraw-to",
    placeholder: "0x… or a Solana address",
    required: true,
    size: 44,
  });
  const send = h("button", { type: "submit" }, "Withdraw");
  const terms = h("p", { class: "muted", id: "withdraw-terms" });
  const quote = h("p", { id: "withdraw-quote" });
  const review = h("section", { class: "panel", id: "withdraw-review", hidden: true });
  const status = h("p", { role: "status", id: "withdraw-status" });
  const form = h(
    "form",
    { class: "row" },
    h("label", {}, "Chain", select),
    h("label", {}, "Amount you receive (dollars)", amount),
    h("label", {}, "To address", to),
    send,
  );
  const chain = () => chainById(ctx, select.value);
  /** The typed amount as ledger units of the selected chain, or a reason it is not one. */
  const asked = (): { units: bigint; chain: Chain } | string => {
    const c = chain();
    if (c === undefined) return "Pick a chain.";
    const decimals = chainLedgerDecimals(ctx, c.id);
    const units = parseDollars(amount.value, decimals);
    if (units === undefined || units <= 0n)
      return `Enter an amount in dollars, with at most ${decimals} decimals.`;
    if (units < c.withdrawalMinimum) {
      return `Withdrawals on ${c.id} are at least ${dollars(c.withdrawalMinimum, decimals)}.`;
    }
    return { units, chain: c };
  };
  const showTerms = () => {
    const c = chain();
    const decimals = chainLedgerDecimals(ctx, select.value);
    terms.textContent =
      c === undefined
        ? ""
        : `Minimum ${dollars(c.withdrawalMinimum, decimals)} · network fee ${dollars(c.withdrawalFee, decimals)}, ` +
          "paid from your balance on top of the amount: it covers the gas the gateway pays to send it.";
    const a = asked();
    quote.textContent = typeof a === "string" ? "" : quoteOf(a.units, a.chain, decimals);
    quote.hidden = false;
    review.hidden = true;
  };
  select.addEventListener("change", showTerms);
  amount.addEventListener("input", showTerms);
  to.addEventListener("input", showTerms);
  showTerms();

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const a = asked();
    if (typeof a === "string") {
      status.className = "error";
      status.textContent = a;
      return;
    }
    status.className = "";
    status.textContent = "";
    const decimals = chainLedgerDecimals(ctx, a.chain.id);
    const address = to.value.trim();
    const withdrawalId = crypto.randomUUID();
    const confirm = h("button", { type: "button" }, "Confirm withdrawal");
    const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
    cancel.addEventListener("click", showTerms);
    confirm.addEventListener("click", async () => {
      confirm.disabled = true;
      cancel.disabled = true;
      send.disabled = true;
      status.textContent = "Sending…";
      try {
        const { withdrawal } = await billing.withdraw({
          chain: a.chain.id,
          amount: a.units,
          toAddress: address,
          withdrawalId,
        });
        status.className = "ok";
        status.textContent =
          `Withdrawal of ${dollars(a.units, decimals)} on ${withdrawal?.chain} queued ` +
          `(network fee ${dollars(withdrawal?.fee ?? 0n, decimals)}).`;
        amount.value = "";
        showTerms();
        await onSent();
      } catch (error) {
        status.className = "error";
        status.textContent = messageOf(error);
        showTerms();
      } finally {
        send.disabled = false;
      }
    });
    mount(
      review,
      h(
        "p",
        { id: "withdraw-confirm-text" },
        `${quoteOf(a.units, a.chain, decimals)} To ${address} on ${a.chain.id}.`,
      ),
      h("div", { class: "row" }, confirm, cancel),
    );
    quote.hidden = true;
    review.hidden = false;
  });
  return h(
    "div",
    {},
    h(
      "p",
      { class: "muted" },
      "Funds backed by your deposits can leave; credit granted by the operator cannot.",
    ),
    form,
    terms,
    quote,
    review,
    status,
  );
}

/** What a withdrawal of `units` on `chain` sends, costs, and takes from the balance. */
function quoteOf(units: bigint, chain: Chain, decimals: number): string {
  const fee = chain.withdrawalFee;
  return (
    `You receive ${dollars(units, decimals)}, network fee ${dollars(fee, decimals)}: ` +
    `${dollars(units + fee, decimals)} leaves your balance.`
  );
}

const TRANSFER: Record<TransferStatus, string> = {
  [TransferStatus.UNSPECIFIED]: "unknown",
  [TransferStatus.QUEUED]: "queued",
  [TransferStatus.SUBMITTED]: "sent",
  [TransferStatus.CONFIRMED]: "confirmed",
};

async function drawWithdrawals(ctx: PageContext, into: HTMLElement): Promise<void> {
  try {
    const { withdrawals } = await billing.listWithdrawals({});
    if (withdrawals.length === 0) {
      mount(into);
      return;
    }
    mount(
      into,
      table(
        ["Time", "Chain", "Amount", "Fee", "To", "Status", "Transaction"],
        withdrawals.map((w) => [
          w.createdAt === undefined ? "" : timestampDate(w.createdAt).toLocaleString(),
          w.chain,
          dollars(w.amount, chainLedgerDecimals(ctx, w.chain)),
          dollars(w.fee, chainLedgerDecimals(ctx, w.chain)),
          h("code", { title: w.toAddress }, short(w.toAddress)),
          h("span", { "data-withdrawal-status": w.id }, TRANSFER[w.status]),
          w.txHash === "" ? "—" : h("code", { title: w.txHash }, short(w.txHash)),
        ]),
        new Set([2, 3]),
      ),
    );
  } catch (error) {
    mount(into, errorLine(error));
  }
}

function short(value: string): string {
  return value.length <= 14 ? value : `${value.slice(0, 8)}…${value.slice(-4)}`;
}
