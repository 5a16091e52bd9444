import { createPublicKey, verify } from "node:crypto";
import type { WalletFamilyText } from "../ports/accounts.js";
import type { WalletSignatures } from "../ports/wallets.js";

/**
 * The fields of a sign-in message that the gateway checks. EVM wallets sign EIP-4361 (parsed by
 * viem); Solana wallets sign the same layout with "Solana account" in the first line and the
 * registry's chain id (e.g. `solana`) as `Chain ID`, as Sign-In With Solana wallets do.
 */
export interface SignInMessage {
  readonly family: WalletFamilyText;
  readonly domain: string;
  /** EVM: EIP-55 checksummed; Solana: base58. */
  readonly address: string;
  readonly uri: string;
  readonly version: string;
  /** EVM: the decimal EIP-155 id; Solana: the registry's chain id. */
  readonly chainId: string;
  readonly nonce: string;
  readonly issuedAt: Date;
  readonly expirationTime: Date | undefined;
  readonly notBefore: Date | undefined;
}

/** Why a sign-in message was refused: the `problem` metadata of SIGN_IN_REFUSED. */
export type SignInProblem =
  | "malformed"
  | "domain"
  | "uri"
  | "version"
  | "chain"
  | "issued_at"
  | "expired"
  | "not_yet_valid"
  | "nonce"
  | "signature";

/** A refused sign-in, with the check that failed. */
export class SignInRefused extends Error {
  constructor(
    readonly problem: SignInProblem,
    message: string,
  ) {
    super(message);
  }
}

const SOLANA_HEADER =
  /^(?<domain>[a-zA-Z0-9+\-.]*(?::[0-9]{1,5})?) wants you to sign in with your Solana account:\n(?<address>[1-9A-HJ-NP-Za-km-z]{32,44})\n\n(?:(?<statement>.*)\n\n)?(?<rest>[\s\S]*)$/;
const FIELD = /^(URI|Version|Chain ID|Nonce|Issued At|Expiration Time|Not Before|Request ID): (.*)$/;
const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

/**
 * Parses a signed message of either family; throws SignInRefused("malformed") when it is not one.
 * EIP-4361 is parsed, and EVM addresses checksummed, through the {@link WalletSignatures} port.
 */
export async function parseSignInMessage(
  family: WalletFamilyText,
  text: string,
  wallets: WalletSignatures,
): Promise<SignInMessage> {
  return family === "evm" ? await parseEvm(text, wallets) : parseSolana(text);
}

async function parseEvm(text: string, wallets: WalletSignatures): Promise<SignInMessage> {
  const parsed = await wallets.parseSiwe(text);
  const { domain, address, uri, version, chainId, nonce, issuedAt } = parsed;
  const checksummed = address === undefined ? undefined : await wallets.evmAddress(address);
  if (
    domain === undefined ||
    checksummed === undefined ||
    uri === undefined ||
    version === undefined ||
    chainId === undefined ||
    nonce === undefined ||
    issuedAt === undefined ||
    Number.isNaN(issuedAt.getTime())
  ) {
    throw new SignInRefused("malformed", "The message is not an EIP-4361 sign-in message.");
  }
  return {
    family: "evm",
    domain,
    address: checksummed,
    uri,
    version,
    chainId: String(chainId),
    nonce,
    issuedAt,
    expirationTime: validDate(parsed.expirationTime),
    notBefore: validDate(parsed.notBefore),
  };
}

function parseSolana(text: string): SignInMessage {
  const header = SOLANA_HEADER.exec(text)?.groups;
  if (header === undefined) {
    throw new SignInRefused("malformed", "The message is not a Solana sign-in message.");
  }
  const fields = new Map<string, string>();
  for (const line of (header.rest ?? "").split("\n")) {
    const match = FIELD.exec(line);
    if (match === null) continue;
    if (fields.has(match[1]!)) throw new SignInRefused("malformed", `The message repeats ${match[1]}.`);
    fields.set(match[1]!, match[2]!);
  }
  const date = (name: string) => {
    const value = fields.get(name);
    if (value === undefined) return undefined;
    if (!DATE_TIME.test(value)) throw new SignInRefused("malformed", `${name} is not an RFC 3339 time.`);
    return new Date(value);
  };
  const issuedAt = date("Issued At");
  const [uri, version, chainId, nonce] = ["URI", "Version", "Chain ID", "Nonce"].map((name) =>
    fields.get(name),
  );
  if (
    uri === undefined ||
    version === undefined ||
    chainId === undefined ||
    nonce === undefined ||
    issuedAt === undefined
  ) {
    throw new SignInRefused("malformed", "The message lacks URI, Version, Chain ID, Nonce or Issued At.");
  }
  return {
    family: "solana",
    domain: header.domain!,
    address: header.address!,
    uri,
    version,
    chainId,
    nonce,
    issuedAt,
    expirationTime: date("Expiration Time"),
    notBefore: date("Not Before"),
  };
}

function validDate(value: Date | undefined): Date | undefined {
  if (value !== undefined && Number.isNaN(value.getTime())) {
    throw new SignInRefused("malformed", "A time in the message is not an RFC 3339 time.");
  }
  return value;
}

/** What a message must match: the gateway's own domain and origin, and its chains. */
export interface SignInExpectations {
  readonly domain: string;
  readonly origin: string;
  /** The `Chain ID` values accepted for this family. */
  readonly chainIds: ReadonlySet<string>;
  readonly now: number;
  /** How far in the future `Issued At` may be, for clock skew. */
  readonly skewMs: number;
}

/** Checks everything but the nonce and the signature; throws SignInRefused naming the first failure. */
export function checkSignInMessage(message: SignInMessage, expected: SignInExpectations): void {
  if (message.domain !== expected.domain) {
    throw new SignInRefused(
      "domain",
      `The message is for ${JSON.stringify(message.domain)}, not ${JSON.stringify(expected.domain)}.`,
    );
  }
  if (originOf(message.uri) !== expected.origin) {
    throw new SignInRefused("uri", `The message's URI is not on ${expected.origin}.`);
  }
  if (message.version !== "1") throw new SignInRefused("version", "Only version 1 messages are accepted.");
  if (!expected.chainIds.has(message.chainId)) {
    throw new SignInRefused(
      "chain",
      `Chain ID ${JSON.stringify(message.chainId)} is not one of ${[...expected.chainIds].join(", ")}.`,
    );
  }
  if (message.issuedAt.getTime() > expected.now + expected.skewMs) {
    throw new SignInRefused("issued_at", "The message was issued in the future.");
  }
  if (message.expirationTime !== undefined && message.expirationTime.getTime() <= expected.now) {
    throw new SignInRefused("expired", "The message has expired.");
  }
  if (message.notBefore !== undefined && message.notBefore.getTime() > expected.now) {
    throw new SignInRefused("not_yet_valid", "The message is not valid yet.");
  }
}

function originOf(uri: string): string | undefined {
  try {
    return new URL(uri).origin;
  } catch {
    return undefined;
  }
}

// DER prefix of an Ed25519 SubjectPublicKeyInfo; the 32 raw key bytes follow it.
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/** True when `signature` is the message's address signing `text`. */
export async function verifySignInSignature(
  message: SignInMessage,
  text: string,
  signature: string,
  wallets: WalletSignatures,
): Promise<boolean> {
  if (message.family === "evm") {
    if (!/^0x[0-9a-fA-F]{130}$/.test(signature)) return false;
    return await wallets.verifyEvm(message.address, text, signature);
  }
  const bytes = Buffer.from(signature, "base64");
  if (bytes.length !== 64) return false;
  const key = await wallets.solanaPublicKey(message.address);
  if (key === undefined) return false;
  const publicKey = createPublicKey({
    key: Buffer.concat([ED25519_SPKI_PREFIX, key]),
    format: "der",
    type: "spki",
  });
  return verify(null, Buffer.from(text, "utf8"), publicKey, bytes);
}
