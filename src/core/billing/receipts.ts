import { createHash, createPrivateKey, createPublicKey, hkdfSync, type KeyObject, sign } from "node:crypto";
import {
  type HoldState,
  heldOf,
  type RaiseRow,
  type ResolutionRow,
  type SettlementView,
} from "../ports/ledger.js";
import type { X402PaymentRow } from "../ports/x402.js";
import { receiptNotFound, receiptPending } from "./billing-errors.js";
import type { ChainConfig } from "./chain-registry.js";
import { formatUnits, ledgerDecimals } from "./money.js";
import { isX402Account } from "./x402-accounts.js";

/**
 * Signed receipts: what one call was charged, signed by the gateway in the JWS form of x402's
 * offer-and-receipt extension (specs/extensions/extension-offer-and-receipt.md §5), so that
 * anyone holding the receipt and the gateway's published key can check it offline. The
 * extension's EIP-712 `Receipt` type has five fixed fields and cannot carry a request id or a
 * charge; its JWS form carries any payload, so Tollgate signs the extension's fields
 * (`network`, `resourceUrl`, `payer`, `issuedAt`, `transaction`) and its own beside them.
 * See docs/receipts.md.
 */

/** The signing algorithm: Ed25519 (RFC 8037), deterministic, so a receipt re-signed over the same state is the same. */
const ALG = "EdDSA";
/** What the receipt key is derived from the master secret with (HKDF-SHA256's `info`). */
const KEY_INFO = "tollgate receipt signing key v1";
/** A PKCS#8 Ed25519 private key is this prefix then the 32-byte seed (RFC 8410). */
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

/** The Ed25519 key for a 32-byte seed. */
export function receiptKeyFromSeed(seed: Uint8Array): KeyObject {
  if (seed.byteLength !== 32) throw new Error("an Ed25519 seed is 32 bytes");
  return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: "der", type: "pkcs8" });
}

/**
 * The receipt key of a deployment: derived from its master secret (HKDF-SHA256), so every host
 * signs with the same key and no second secret has to be distributed or backed up.
 */
export function receiptKeyFromMasterSecret(masterSecret: Uint8Array): KeyObject {
  return receiptKeyFromSeed(
    new Uint8Array(hkdfSync("sha256", masterSecret, new Uint8Array(0), KEY_INFO, 32)),
  );
}

/** A published verification key: a public Ed25519 JWK with its id (RFC 7638 thumbprint) and use. */
export interface ReceiptJwk {
  readonly kty: "OKP";
  readonly crv: "Ed25519";
  readonly x: string;
  readonly kid: string;
  readonly alg: typeof ALG;
  readonly use: "sig";
}

/** What a receipt says, as signed (every amount an integer string: they are bigints). */
export interface ReceiptPayload {
  /** The billing chain as CAIP-2 names it (`eip155:8453`). */
  readonly network: string;
  /** The route the call was made on, on the gateway's public origin when it is known. */
  readonly resourceUrl: string;
  /** Who paid: the account; for a call paid with x402, the payer's wallet address. */
  readonly payer: string;
  /** When the call was settled (Unix seconds): a receipt re-fetched later says the same. */
  readonly issuedAt: number;
  /**
   * The onchain settlement's transaction once confirmed (calls batched together share one); for
   * a call paid with x402, the transaction that collected its payment.
   */
  readonly transaction?: string;
  readonly requestId: string;
  readonly accountId: string;
  /** The API key that made the call; absent for a call without one. */
  readonly keyId?: string;
  readonly model: string;
  /**
   * The configured name of the provider endpoint that served the call, when the gateway routes
   * among several (docs/providers.md); absent otherwise. The price is the model's whatever it was.
   */
  readonly endpoint?: string;
  readonly imageSize?: string;
  /** The chain's id in the gateway (`x-gateway-billing-chain`). */
  readonly chain: string;
  /** `settled` (charged), `released` or `expired` (nothing charged). */
  readonly status: ResolutionRow["status"];
  readonly charge: {
    /** In the chain's ledger units (10^-min(decimals, 9) of the asset; µ$ for 6 decimals). */
    readonly amount: string;
    /** The same as a decimal of the asset ("0.000162"). */
    readonly decimal: string;
    readonly asset: { readonly symbol: string; readonly address: string; readonly decimals: number };
  };
  /** What was held for the call (its worst case before it ran, plus any raises as it ran), in the same units. */
  readonly held: string;
  /**
   * A call held pass by pass: each raise of its hold as it ran (the pass it was raised for and
   * by how much, in the same units); `held` less their sum is its first hold. Absent when none.
   */
  readonly raises?: readonly { readonly pass: number; readonly amount: string }[];
  /** The delivered usage the charge was priced from. */
  readonly usage: Readonly<Record<string, string>>;
  /** How the charge was reached, line by line (the ledger's charge record); absent for image calls. */
  readonly charges?: unknown;
  /** Where moving the charge onchain stands (absent when nothing was charged). */
  readonly settlement?: {
    readonly status: string;
    readonly onchainAmount: string;
    readonly offchainAmount: string;
    readonly transaction?: string;
  };
  /**
   * A call paid with x402: the scheme, what the payment authorised and what was collected (in
   * the chain's ledger units), where the collection stands (`authorised` while it runs,
   * `settled`, `unused` when nothing was charged, `failed`), and its transaction.
   */
  readonly x402?: {
    readonly scheme: string;
    readonly authorised: string;
    readonly collected: string;
    readonly status: string;
    readonly transaction?: string;
  };
}

/**
 * Where a call paid with x402 has its receipt (the x402 door): `GET {origin}/x402/v1/receipts/{id}`,
 * served to its payer signed in with x402's sign-in-with-x. A sign-in proof is bound to this path.
 */
export const X402_RECEIPTS_PATH = "/x402/v1/receipts";

/** The x402 door's path of one call's receipt (the request id percent-encoded, as a client sends it). */
export function x402ReceiptPath(requestId: string): string {
  return `${X402_RECEIPTS_PATH}/${encodeURIComponent(requestId)}`;
}

/** The routes a receipt's `resourceUrl` names, by call kind. */
const ROUTES = { text: "/v1/messages", image: "/v1/images" } as const;

/** What a resolved call's receipt says; `origin` is the gateway's public origin when known. */
export function receiptPayload(
  state: HoldState & { readonly resolution: ResolutionRow },
  chain: ChainConfig,
  settlement: SettlementView | undefined,
  origin: string | undefined,
  payment?: X402PaymentRow,
  raises: readonly RaiseRow[] = [],
): ReceiptPayload {
  const { hold, resolution } = state;
  const confirmed = settlement?.status === "confirmed" && settlement.txHash !== "";
  const transaction = payment !== undefined ? payment.txHash : confirmed ? settlement.txHash : "";
  const usage = resolution.usage;
  return {
    network: chain.network,
    resourceUrl: `${origin ?? ""}${ROUTES[hold.callKind]}`,
    payer: payment?.payer ?? hold.accountId,
    issuedAt: Math.floor(resolution.resolvedAt / 1000),
    ...(transaction === "" ? {} : { transaction }),
    requestId: hold.requestId,
    accountId: hold.accountId,
    ...(hold.keyId === "" ? {} : { keyId: hold.keyId }),
    model: hold.model,
    ...(usage.endpoint ? { endpoint: usage.endpoint } : {}),
    ...(hold.imageSize === "" ? {} : { imageSize: hold.imageSize }),
    chain: chain.id,
    status: resolution.status,
    charge: {
      amount: `${resolution.amount}`,
      decimal: formatUnits(resolution.amount, ledgerDecimals(chain.asset.decimals)),
      asset: { ...chain.asset },
    },
    held: `${heldOf(hold)}`,
    ...(raises.length === 0 ? {} : { raises: raises.map((r) => ({ pass: r.pass, amount: `${r.amount}` })) }),
    usage: {
      inputTokens: `${usage.inputTokens}`,
      outputTokens: `${usage.outputTokens}`,
      cacheWrite5mTokens: `${usage.cacheWrite5mTokens}`,
      cacheWrite1hTokens: `${usage.cacheWrite1hTokens}`,
      cacheReadTokens: `${usage.cacheReadTokens}`,
      images: `${usage.images}`,
    },
    ...(resolution.charges === "" ? {} : { charges: JSON.parse(resolution.charges) as unknown }),
    ...(resolution.amount === 0n || settlement === undefined
      ? {}
      : {
          settlement: {
            status: settlement.status,
            onchainAmount: `${settlement.onchainAmount}`,
            offchainAmount: `${settlement.offchainAmount}`,
            ...(settlement.txHash === "" ? {} : { transaction: settlement.txHash }),
          },
        }),
    ...(payment === undefined
      ? {}
      : {
          x402: {
            scheme: payment.scheme,
            authorised: `${payment.authorised}`,
            collected: `${payment.settled}`,
            status: payment.status,
            ...(payment.txHash === "" ? {} : { transaction: payment.txHash }),
          },
        }),
  };
}

/**
 * Signs receipts with one Ed25519 key, and publishes its public half. A receipt's `kid` is a
 * DID URL when the gateway's origin is known (`did:web:<host>#<thumbprint>`, resolved through
 * `/.well-known/did.json`), the bare thumbprint otherwise; either way the thumbprint selects the
 * key in `/.well-known/jwks.json`.
 */
export class ReceiptSigner {
  readonly jwk: ReceiptJwk;
  /**
   * The encoded protected header by origin: the same for every receipt of an origin, so it is
   * encoded once rather than on every call (docs/performance.md §21). A gateway has one origin
   * (or none); the map is cleared should it ever see many.
   */
  private readonly headers = new Map<string | undefined, string>();

  constructor(private readonly key: KeyObject) {
    if (key.asymmetricKeyType !== "ed25519") throw new Error("receipts are signed with an Ed25519 key");
    const { x } = createPublicKey(key).export({ format: "jwk" }) as { x: string };
    // RFC 7638: the SHA-256 of the required members, in lexicographic order, without spaces.
    const thumbprint = createHash("sha256")
      .update(JSON.stringify({ crv: "Ed25519", kty: "OKP", x }))
      .digest("base64url");
    this.jwk = { kty: "OKP", crv: "Ed25519", x, kid: thumbprint, alg: ALG, use: "sig" };
  }

  /** The key set verifiers fetch (RFC 7517). */
  jwks(): { readonly keys: readonly ReceiptJwk[] } {
    return { keys: [this.jwk] };
  }

  /**
   * The receipt as a JWS compact string (RFC 7515 §7.1: the base64url of the protected header
   * and of the payload, joined by a dot, and the Ed25519 signature of those bytes). Signed with
   * node:crypto directly: about 60 µs a receipt, where jose's WebCrypto path took 150 µs or more,
   * on every non-streaming call (test/billing/receipts.test.ts verifies the result with jose).
   */
  sign(payload: ReceiptPayload, origin: string | undefined): string {
    const header = this.header(origin);
    const signingInput = `${header}.${base64url(payload)}`;
    return `${signingInput}.${sign(null, Buffer.from(signingInput), this.key).toString("base64url")}`;
  }

  /** The base64url of the protected header for receipts of `origin`. */
  private header(origin: string | undefined): string {
    let header = this.headers.get(origin);
    if (header === undefined) {
      header = base64url({ alg: ALG, kid: keyId(this.jwk.kid, origin), typ: "x402-receipt+jws" });
      if (this.headers.size >= 16) this.headers.clear();
      this.headers.set(origin, header);
    }
    return header;
  }
}

function base64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString("base64url");
}

/** `did:web:<host>#<thumbprint>` for an origin (its port percent-encoded, as did:web writes it). */
export function keyId(thumbprint: string, origin: string | undefined): string {
  if (origin === undefined) return thumbprint;
  return `${didWeb(origin)}#${thumbprint}`;
}

/** The did:web DID of an origin (`https://gw.example:8443` → `did:web:gw.example%3A8443`). */
export function didWeb(origin: string): string {
  return `did:web:${encodeURIComponent(new URL(origin).host)}`;
}

/** Where receipts read a call from: the ledger (through Billing) and its onchain settlement. */
export interface ReceiptSource {
  call(accountId: string, requestId: string): Promise<HoldState | undefined>;
  chainConfig(id: string): ChainConfig | undefined;
  settlements(holdIds: readonly string[]): Promise<Map<string, SettlementView>>;
  /** The x402 payments of these calls (calls paid with a key have none). */
  x402Payments(holdIds: readonly string[]): Promise<Map<string, X402PaymentRow>>;
  /** A hold's raises, by pass (read only for a hold that was raised). */
  raises(holdId: string): Promise<RaiseRow[]>;
}

/**
 * Receipts of calls, signed from what the ledger says of them when asked. The origin a receipt
 * names is the configured public URL (TOLLGATE_PUBLIC_URL) when there is one: only without it is
 * the origin the facade saw (its Host header) taken, which a caller could choose.
 */
export class Receipts {
  constructor(
    readonly signer: ReceiptSigner,
    private readonly source: ReceiptSource,
    private readonly publicOrigin?: string,
  ) {}

  /** The receipt of the account's call `requestId`; NotFound or Pending when there is none yet. */
  async forCall(accountId: string, requestId: string, origin: string | undefined): Promise<string> {
    const state = await this.source.call(accountId, requestId);
    if (state === undefined) throw receiptNotFound(requestId);
    const settlement = (await this.source.settlements([state.hold.id])).get(state.hold.id);
    return this.forState(state, origin, settlement);
  }

  /** The receipt of a call as `state` has it (one just resolved has no settlement yet); Pending while it runs. */
  async forState(state: HoldState, origin: string | undefined, settlement?: SettlementView): Promise<string> {
    const { hold, resolution } = state;
    if (resolution === undefined) throw receiptPending(hold.requestId);
    const chain = this.source.chainConfig(hold.chain);
    if (chain === undefined) throw new Error(`a call billed on ${hold.chain}, a chain no longer configured`);
    const named = this.publicOrigin ?? origin;
    const payment = isX402Account(hold.accountId)
      ? (await this.source.x402Payments([hold.id])).get(hold.id)
      : undefined;
    const raises = hold.raised > 0n ? await this.source.raises(hold.id) : [];
    return this.signer.sign(
      receiptPayload({ hold, resolution }, chain, settlement, named, payment, raises),
      named,
    );
  }
}

/** `value` when it is exactly an http(s) origin (`https://gw.example:8443`), else undefined. */
export function httpOrigin(value: string): string | undefined {
  try {
    const url = new URL(value);
    return (url.protocol === "http:" || url.protocol === "https:") && url.origin === value
      ? value
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The gateway's public origin as the facade saw it (its `x-gateway-origin` metadata), for the
 * receipts it names; undefined for a caller of the RPCs that sent none, or sent no origin.
 */
export function gatewayOrigin(headers: Headers): string | undefined {
  return httpOrigin(headers.get("x-gateway-origin") ?? "");
}
