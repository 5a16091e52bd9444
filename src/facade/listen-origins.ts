import type { Server } from "node:net";

/**
 * The origins the facade's own listener is reached at, for a gateway without TOLLGATE_PUBLIC_URL
 * (`tollgate dev`, tests): from the socket it bound, never from a request. A loopback bind is
 * also `http://localhost:<port>` (how a browser on the same machine may spell it); a wildcard
 * bind is the loopback spellings only (set TOLLGATE_PUBLIC_URL to sign in from elsewhere). None
 * until the facade listens.
 */
export function listenOrigins(server: Server | undefined): string[] {
  const bound = server?.address();
  if (bound === null || bound === undefined || typeof bound === "string") return [];
  const { address, port } = bound;
  const localhost = `http://localhost:${port}`;
  if (address === "0.0.0.0" || address === "::") return [`http://127.0.0.1:${port}`, localhost];
  const own = `http://${address.includes(":") ? `[${address}]` : address}:${port}`;
  return address === "127.0.0.1" || address === "::1" ? [own, localhost] : [own];
}
