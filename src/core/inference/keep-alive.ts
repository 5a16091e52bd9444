/**
 * Relays `source` and yields `ping` whenever it has been silent for `intervalMs`, so that a
 * client with an idle timeout (Claude Code aborts a byte-silent stream after 300 s) keeps
 * waiting for a provider that is thinking. One timer is re-armed per item instead of one
 * created per item.
 */
export async function* withKeepAlive<T, P>(
  source: AsyncIterator<T>,
  intervalMs: number,
  ping: P,
): AsyncGenerator<T | P> {
  let wake: (() => void) | undefined;
  const timer = setTimeout(() => wake?.(), intervalMs);
  try {
    for (;;) {
      const next = source.next();
      // The race below may leave `next` unawaited when the consumer stops early.
      next.catch(() => {});
      for (;;) {
        timer.refresh();
        const silent = new Promise<"silent">((resolve) => {
          wake = () => resolve("silent");
        });
        const result = await Promise.race([next, silent]);
        if (result === "silent") {
          yield ping;
          continue;
        }
        if (result.done) return;
        yield result.value;
        break;
      }
    }
  } finally {
    clearTimeout(timer);
    wake = undefined;
    // Not awaited: a read still pending upstream would hold it until the upstream is aborted.
    source.return?.(undefined).catch(() => {});
  }
}
