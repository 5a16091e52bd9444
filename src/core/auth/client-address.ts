import { isIP, isIPv4 } from "node:net";
import { createContextKey } from "@connectrpc/connect";

/**
 * The address of the connection an RPC came on, set by the core's network server; undefined for
 * in-process calls (the facade's), which name their client's address in the request instead.
 */
export const peerAddressKey = createContextKey<string | undefined>(undefined, {
  description: "peer address",
});

/** Whether `address` is an IPv4 or IPv6 address (what a request's `client_address` must be). */
export function isAddress(address: string): boolean {
  return isIP(address) !== 0;
}

/**
 * The key an address's failed authentications are counted under: an IPv4 address as it is, also
 * when mapped into IPv6 (`::ffff:192.0.2.1`, what a dual-stack socket reports); an IPv6 address
 * by its /64 — one subscriber's usual allocation, so hopping between its 2^64 addresses does not
 * start a fresh count. Anything else (never from the network) as it is.
 */
export function throttleKey(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped !== undefined && isIPv4(mapped)) return mapped;
  if (isIP(address) !== 6) return address;
  return `${ipv6Groups(address).slice(0, 4).join(":")}::/64`;
}

/** The eight 16-bit groups of a valid IPv6 address, in lower-case hex without leading zeros. */
function ipv6Groups(address: string): string[] {
  let text = address.split("%")[0]!.toLowerCase();
  // A trailing dotted quad (`64:ff9b::192.0.2.1`) is the last two groups.
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (quad !== null) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = "", tail] = text.split("::");
  const split = (part: string) => (part === "" ? [] : part.split(":"));
  const left = split(head);
  const right = tail === undefined ? [] : split(tail);
  const zeros = tail === undefined ? [] : Array<string>(8 - left.length - right.length).fill("0");
  return [...left, ...zeros, ...right].map((group) => Number.parseInt(group, 16).toString(16));
}
