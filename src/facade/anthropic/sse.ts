/**
 * One server-sent event on the wire. `data` is relayed as the provider wrote it; each of its
 * lines gets its own `data:` field, so a multi-line payload survives intact.
 */
export function encodeEvent(event: string, data: string): string {
  const lines = data.includes("\n") ? data.split("\n").join("\ndata: ") : data;
  return `event: ${event}\ndata: ${lines}\n\n`;
}

/** An SSE comment line (clients ignore it; it keeps idle connections alive). */
export function encodeComment(text: string): string {
  return `:${text === "" ? "" : ` ${text}`}\n\n`;
}
