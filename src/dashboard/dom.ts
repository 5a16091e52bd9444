/** Attributes and event handlers for {@link h}. */
type Props = Record<string, string | number | boolean | ((event: Event) => void) | undefined>;
/** What an element may contain. */
export type Child = Node | string | number | null | undefined | false | Child[];

/** Builds an element: `h("button", { onclick }, "Save")`. Text is always text, never HTML. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") element.addEventListener(name.replace(/^on/, ""), value);
    else if (value === true) element.setAttribute(name, "");
    else element.setAttribute(name, String(value));
  }
  append(element, children);
  return element;
}

function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's content. */
export function mount(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

/** A loading line, shown while a page's first call is in flight. */
export function loading(what: string): HTMLElement {
  return h("p", { class: "loading", role: "status" }, `Loading ${what}…`);
}

/** An error line with the message of whatever was thrown. */
export function errorLine(error: unknown): HTMLElement {
  return h("p", { class: "error", role: "alert" }, messageOf(error));
}

/** A readable message for a thrown value (Connect errors carry the core's message). */
export function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message.replace(/^\[[a-z_]+\] /, "");
  return String(error);
}

/** A button that copies `text` to the clipboard and says so. */
export function copyButton(text: string, label = "Copy"): HTMLButtonElement {
  const button = h("button", { type: "button", class: "secondary" }, label);
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch {
      button.textContent = "Select and copy by hand";
    }
    setTimeout(() => {
      button.textContent = label;
    }, 2000);
  });
  return button;
}

/**
 * A table. Below 600 px each row becomes a card of "header: value" lines (app.css, from each
 * cell's `data-label`), so no table is wider than a phone's screen.
 */
export function table(
  head: string[],
  rows: Child[][],
  numeric: ReadonlySet<number> = new Set(),
): HTMLElement {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          head.map((title, i) => h("th", { class: numeric.has(i) ? "num" : undefined, scope: "col" }, title)),
        ),
      ),
      h(
        "tbody",
        {},
        rows.map((cells) =>
          h(
            "tr",
            {},
            cells.map((cell, i) =>
              h("td", { class: numeric.has(i) ? "num" : undefined, "data-label": head[i] }, cell),
            ),
          ),
        ),
      ),
    ),
  );
}
