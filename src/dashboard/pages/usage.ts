import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  chargeLineView,
  formatChargeLine,
  isPlainTokenLine,
  unpricedWarning,
} from "../../core/billing/charge-format.js";
import { HoldStatus, SettlementStatus, type UsageRow } from "../../gen/tollgate/billing/v1/billing_pb.js";
import { chainLedgerDecimals, type PageContext } from "../context.js";
import { type Child, errorLine, h, loading, mount } from "../dom.js";
import { dollars } from "../money.js";
import { auth, billing } from "../rpc.js";

const PAGE = 1000;
const STATUS: Record<HoldStatus, string> = {
  [HoldStatus.UNSPECIFIED]: "unknown",
  [HoldStatus.PENDING]: "running",
  [HoldStatus.SETTLED]: "charged",
  [HoldStatus.RELEASED]: "not charged",
  [HoldStatus.EXPIRED]: "expired, not charged",
};

const SETTLEMENT: Record<SettlementStatus, string> = {
  [SettlementStatus.UNSPECIFIED]: "—",
  [SettlementStatus.OFFCHAIN]: "off-chain credit",
  [SettlementStatus.QUEUED]: "queued",
  [SettlementStatus.SUBMITTED]: "sent",
  [SettlementStatus.CONFIRMED]: "settled onchain",
};

/** A call's settlement: its state, the transaction hash once there is one, and its receipt. */
function settlement(row: UsageRow): HTMLElement {
  return h(
    "span",
    {},
    h(
      "span",
      { "data-settlement": row.requestId, title: row.settlementTxHash },
      SETTLEMENT[row.settlementStatus],
      row.settlementTxHash === "" ? "" : " ",
      row.settlementTxHash === "" ? "" : h("code", {}, `${row.settlementTxHash.slice(0, 10)}…`),
    ),
    row.status === HoldStatus.PENDING ? "" : [" ", receiptButton(row)],
  );
}

/**
 * Downloads the call's signed receipt (docs/receipts.md), signed when asked: after the
 * settlement confirmed, it names the transaction.
 */
function receiptButton(row: UsageRow): HTMLElement {
  const button = h(
    "button",
    { type: "button", class: "link", "data-receipt": row.requestId, title: "Download the signed receipt" },
    "Receipt",
  );
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const { jws } = await billing.getReceipt({ requestId: row.requestId, origin: location.origin });
      const link = h("a", {
        href: URL.createObjectURL(
          new Blob([`${JSON.stringify({ format: "jws", signature: jws }, null, 2)}\n`], {
            type: "application/json",
          }),
        ),
        download: `receipt-${row.requestId}.json`,
      });
      link.click();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
    } catch (error) {
      button.after(errorLine(error));
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/**
 * One row per call, newest first, with filters by key, model and date, totals per day as a
 * chart, and a CSV export of what the filters show. Filters apply to the rows loaded so far
 * (1,000 per page; "Load more" fetches older ones).
 */
export async function usagePage(ctx: PageContext): Promise<void> {
  const body = h("div", { id: "usage" }, loading("usage"));
  mount(ctx.main, h("h1", {}, "Usage"), body);
  const rows: UsageRow[] = [];
  let next = "";
  const [keys] = await Promise.all([auth.listKeys({}), more()]).catch((error) => {
    mount(body, errorLine(error));
    return [undefined];
  });
  if (keys === undefined) return;
  const keyNames = new Map(keys.keys.map((key) => [key.id, key.name || key.prefix]));

  async function more(): Promise<void> {
    const res = await billing.listUsage({ pageSize: PAGE, pageToken: next });
    rows.push(...res.rows);
    next = res.nextPageToken;
  }

  const keyFilter = h("select", { id: "filter-key" }, h("option", { value: "" }, "All keys"));
  const modelFilter = h("select", { id: "filter-model" }, h("option", { value: "" }, "All models"));
  const from = h("input", { type: "date", id: "filter-from" });
  const to = h("input", { type: "date", id: "filter-to" });
  const results = h("div", {});
  const moreButton = h("button", { type: "button", class: "secondary" }, "Load more");
  const exportButton = h("button", { type: "button", class: "secondary", id: "export-csv" }, "Export CSV");

  const amountOf = (row: UsageRow) => {
    const decimals = chainLedgerDecimals(ctx, row.chain);
    return { text: dollars(row.amount, decimals), decimals };
  };
  const tokens = (row: UsageRow) =>
    row.imageSize !== ""
      ? `${row.usage?.images ?? 0} image(s), ${row.imageSize}`
      : `${row.usage?.inputTokens ?? 0n} in · ${row.usage?.outputTokens ?? 0n} out · ${
          (row.usage?.cacheWrite5mTokens ?? 0n) + (row.usage?.cacheWrite1hTokens ?? 0n)
        } cache write · ${row.usage?.cacheReadTokens ?? 0n} cache read`;

  const filtered = () => {
    const start = from.value === "" ? undefined : new Date(`${from.value}T00:00:00`).getTime();
    const end = to.value === "" ? undefined : new Date(`${to.value}T00:00:00`).getTime() + 86_400_000;
    return rows.filter((row) => {
      const at = row.createdAt === undefined ? 0 : timestampDate(row.createdAt).getTime();
      return (
        (keyFilter.value === "" || row.keyId === keyFilter.value) &&
        (modelFilter.value === "" || row.model === modelFilter.value) &&
        (start === undefined || at >= start) &&
        (end === undefined || at < end)
      );
    });
  };

  const draw = () => {
    const options = (select: HTMLSelectElement, values: string[], label: (v: string) => string) => {
      const chosen = select.value;
      mount(
        select,
        select.options[0]!,
        values.map((v) => h("option", { value: v, selected: v === chosen }, label(v))),
      );
    };
    options(
      keyFilter,
      [...new Set(rows.map((r) => r.keyId).filter((k) => k !== ""))],
      (id) => keyNames.get(id) ?? id,
    );
    options(modelFilter, [...new Set(rows.map((r) => r.model))].sort(), (m) => m);
    const shown = filtered();
    moreButton.hidden = next === "";
    if (shown.length === 0) {
      mount(
        results,
        h("p", { class: "muted" }, rows.length === 0 ? "No calls yet." : "No calls match the filters."),
      );
      return;
    }
    mount(
      results,
      dailyChart(ctx, shown),
      callTable(
        shown.map((row) => ({
          row,
          cells: [
            row.createdAt === undefined ? "" : timestampDate(row.createdAt).toLocaleString(),
            keyNames.get(row.keyId) ?? (row.keyId || "—"),
            h("code", {}, row.model),
            tokens(row),
            h("span", { "data-price": row.requestId }, amountOf(row).text),
            row.chain,
            STATUS[row.status],
            settlement(row),
          ],
        })),
      ),
    );
  };

  for (const input of [keyFilter, modelFilter, from, to]) input.addEventListener("change", draw);
  moreButton.addEventListener("click", async () => {
    moreButton.disabled = true;
    try {
      await more();
      draw();
    } catch (error) {
      results.prepend(errorLine(error));
    } finally {
      moreButton.disabled = false;
    }
  });
  exportButton.addEventListener("click", () => {
    const lines = [
      "time,request_id,key,model,image_size,input_tokens,output_tokens,cache_write_5m_tokens,cache_write_1h_tokens,cache_read_tokens,images,chain,status,amount,settlement,settlement_tx,charges,unpriced",
      ...filtered().map((row) =>
        [
          row.createdAt === undefined ? "" : timestampDate(row.createdAt).toISOString(),
          row.requestId,
          keyNames.get(row.keyId) ?? row.keyId,
          row.model,
          row.imageSize,
          row.usage?.inputTokens ?? 0n,
          row.usage?.outputTokens ?? 0n,
          row.usage?.cacheWrite5mTokens ?? 0n,
          row.usage?.cacheWrite1hTokens ?? 0n,
          row.usage?.cacheReadTokens ?? 0n,
          row.usage?.images ?? 0,
          row.chain,
          STATUS[row.status],
          amountOf(row).text.replace(/[$,]/g, ""),
          SETTLEMENT[row.settlementStatus],
          row.settlementTxHash,
          row.charges.map(formatChargeLine).join("; "),
          row.unpriced.join("; "),
        ]
          .map(csvField)
          .join(","),
      ),
    ];
    const link = h("a", {
      href: URL.createObjectURL(new Blob([`${lines.join("\n")}\n`], { type: "text/csv" })),
      download: "tollgate-usage.csv",
    });
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  });

  mount(
    body,
    h(
      "form",
      { class: "row", onsubmit: (event: Event) => event.preventDefault() },
      h("label", {}, "Key", keyFilter),
      h("label", {}, "Model", modelFilter),
      h("label", {}, "From", from),
      h("label", {}, "To", to),
      exportButton,
    ),
    results,
    moreButton,
  );
  draw();
}

const CALL_HEADERS = ["Time", "Key", "Model", "Usage", "Price", "Chain", "Status", "Settlement"];
/** The Price column: right-aligned amounts. */
const PRICE_COLUMN = 4;

/**
 * The calls as a table, each call followed by a row with its charge lines and its unpriced
 * warning when it has any. Its long cells wrap, so every column is in view at 1280 px; below
 * 600 px each call is a card (app.css).
 */
function callTable(calls: { row: UsageRow; cells: Child[] }[]): HTMLElement {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "calls" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          CALL_HEADERS.map((title, i) =>
            h("th", { class: i === PRICE_COLUMN ? "num" : undefined, scope: "col" }, title),
          ),
        ),
      ),
      h(
        "tbody",
        {},
        calls.map(({ row, cells }) => {
          const breakdown = chargeBreakdown(row);
          return [
            h(
              "tr",
              { class: breakdown === undefined ? undefined : "has-charges" },
              cells.map((cell, i) =>
                h(
                  "td",
                  { class: i === PRICE_COLUMN ? "num" : undefined, "data-label": CALL_HEADERS[i] },
                  cell,
                ),
              ),
            ),
            breakdown === undefined
              ? null
              : h("tr", { class: "charges-row" }, h("td", { colspan: CALL_HEADERS.length }, breakdown)),
          ];
        }),
      ),
    ),
  );
}

/**
 * A call's charge lines ("3 web searches $0.03", "… fast mode ×2 …", "declined attempt (not
 * charged)") and its unpriced warning; undefined when it has neither (image calls, older rows).
 * The lines start folded when they say nothing the row does not (one plain token pass).
 */
function chargeBreakdown(row: UsageRow): HTMLElement | undefined {
  if (row.charges.length === 0 && row.unpriced.length === 0) return undefined;
  const plain = row.charges.length === 1 && isPlainTokenLine(row.charges[0]!);
  const warning = unpricedWarning(row.unpriced);
  const count = row.charges.length;
  return h(
    "div",
    { class: "charge-box", "data-charges": row.requestId },
    warning === "" ? null : h("p", { class: "warning unpriced", role: "note" }, warning),
    count === 0
      ? null
      : h(
          "details",
          { open: !plain },
          h("summary", {}, `Charge breakdown (${count} ${count === 1 ? "line" : "lines"})`),
          h(
            "ul",
            { class: "charge-lines" },
            row.charges.map((line) => {
              const view = chargeLineView(line);
              return h(
                "li",
                { class: view.charged ? undefined : "not-charged" },
                h("span", { class: "charge-label" }, view.label),
                view.counts === "" ? null : h("span", { class: "charge-counts muted" }, view.counts),
                h("span", { class: "charge-amount" }, view.amount),
              );
            }),
          ),
        ),
  );
}

function csvField(value: unknown): string {
  const text = String(value);
  return /[",\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

/** Totals per day (in dollars, summed in each chain's exact units) as an inline SVG bar chart. */
function dailyChart(ctx: PageContext, rows: UsageRow[]): HTMLElement {
  // Sum in nano-dollars so chains with different ledger decimals add up exactly.
  const perDay = new Map<string, bigint>();
  for (const row of rows) {
    if (row.createdAt === undefined) continue;
    const day = timestampDate(row.createdAt).toISOString().slice(0, 10);
    const decimals = chainLedgerDecimals(ctx, row.chain);
    const nano = row.amount * 10n ** BigInt(9 - decimals);
    perDay.set(day, (perDay.get(day) ?? 0n) + nano);
  }
  const days = [...perDay.keys()].sort().slice(-31);
  let max = 1n;
  for (const day of days) if (perDay.get(day)! > max) max = perDay.get(day)!;
  const width = 600;
  const height = 160;
  // At least two weeks of slots, so a single day is a bar, not a wall.
  const bar = width / Math.max(days.length, 14);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height + 30}`);
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute(
    "aria-label",
    `Spend per day: ${days.map((d) => `${d} ${dollars(perDay.get(d)!, 9)}`).join("; ")}`,
  );
  days.forEach((day, i) => {
    const value = perDay.get(day)!;
    const barHeight = Math.max(1, Number((value * BigInt(height)) / max));
    const rect = document.createElementNS(svg.namespaceURI, "rect");
    rect.setAttribute("x", String(i * bar + 2));
    rect.setAttribute("y", String(height - barHeight));
    rect.setAttribute("width", String(Math.max(bar - 4, 1)));
    rect.setAttribute("height", String(barHeight));
    const title = document.createElementNS(svg.namespaceURI, "title");
    title.textContent = `${day}: ${dollars(value, 9)}`;
    rect.appendChild(title);
    const label = document.createElementNS(svg.namespaceURI, "text");
    label.setAttribute("x", String(i * bar + bar / 2));
    label.setAttribute("y", String(height + 14));
    label.setAttribute("text-anchor", "middle");
    label.textContent = day.slice(5);
    svg.append(rect, label);
  });
  return h("figure", { id: "usage-chart" }, svg, h("figcaption", { class: "muted" }, "Spend per day (UTC)"));
}
