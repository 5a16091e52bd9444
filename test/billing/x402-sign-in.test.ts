import { Code, ConnectError } from "@connectrpc/connect";
import { generateKeyPairSigner } from "@solana/kit";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import {
  type CompleteSIWxInfo,
  createSIWxPayload,
  encodeSIWxHeader,
  SIGN_IN_WITH_X,
  type SIWxExtension,
  type SIWxSigner,
} from "@x402/extensions/sign-in-with-x";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createSignInWithX } from "../../src/chains/x402/sign-in-with-x.js";
import { defaultChainRegistry } from "../../src/core/billing/default-chains.js";
import { PAYMENT_REQUIRED_METADATA } from "../../src/core/billing/x402-accounts.js";
import { SIGN_IN_TTL_MS, X402SignIn } from "../../src/core/billing/x402-sign-in.js";
import { errorInfo } from "../../src/core/errors.js";
import { type Db, openDatabase } from "../../src/store/sqlite/database.js";
import { SessionRepository } from "../../src/store/sqlite/sessions.js";

// The keyless payer's wallet sign-in (src/core/billing/x402-sign-in.ts) over the real nonce
// store: what the e2e test cannot reach cheaply (no configured origin, a challenge that
// expired, a dashboard nonce, Solana wallets, two uses of one proof at once).

const ORIGIN = "https://gw.example";
const PATH = "/x402/v1/receipts/req_1";
const chains = defaultChainRegistry().chains.filter((c) => c.enabled);
const evmNetwork = chains.find((c) => c.family === "evm")!.network;
const solanaNetwork = chains.find((c) => c.family === "solana")?.network;

let db: Db;
let sessions: SessionRepository;
beforeEach(() => {
  db = openDatabase(":memory:");
  sessions = new SessionRepository(db);
});
afterEach(() => db.close());

function signIn(options: { origin?: () => string | undefined; now?: () => number } = {}): X402SignIn {
  return new X402SignIn({
    nonces: sessions,
    origin: options.origin ?? (() => ORIGIN),
    chains,
    proofs: createSignInWithX(),
    now: options.now ?? Date.now,
  });
}

/** The refusal `promise` ends with: its code and reason. */
async function refusal(promise: Promise<unknown>): Promise<{ code: Code; reason: string; message: string }> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ConnectError);
  const connect = error as ConnectError;
  return { code: connect.code, reason: errorInfo(connect)?.reason ?? "", message: connect.rawMessage };
}

/** A fresh challenge for PATH, as the 402's PAYMENT-REQUIRED declares it. */
async function challenge(of = signIn()): Promise<SIWxExtension> {
  const error = (await of.payer("", PATH).catch((e: unknown) => e)) as ConnectError;
  expect(errorInfo(error)?.reason).toBe("X402_SIGN_IN_REQUIRED");
  const header = errorInfo(error)!.metadata[PAYMENT_REQUIRED_METADATA]!;
  return decodePaymentRequiredHeader(header).extensions![SIGN_IN_WITH_X] as SIWxExtension;
}

async function proof(extension: SIWxExtension, signer: SIWxSigner, changes: Partial<CompleteSIWxInfo> = {}) {
  const info: CompleteSIWxInfo = { ...extension.info, chainId: evmNetwork, type: "eip191", ...changes };
  return encodeSIWxHeader(await createSIWxPayload(info, signer, `${ORIGIN}${PATH}`));
}

const nonces = () => (db.prepare("SELECT COUNT(*) AS n FROM sign_in_nonces").get() as { n: number }).n;

describe("x402 sign-in for keyless receipts", () => {
  it("fails closed without a public origin: 503 naming TOLLGATE_PUBLIC_URL, nothing stored", async () => {
    let origin: string | undefined;
    const unbound = signIn({ origin: () => origin });
    for (const header of ["", "e30="]) {
      const refused = await refusal(unbound.payer(header, PATH));
      expect(refused).toMatchObject({ code: Code.Unavailable, reason: "X402_SIGN_IN_UNAVAILABLE" });
      expect(refused.message).toMatch(/TOLLGATE_PUBLIC_URL/);
    }
    expect(nonces()).toBe(0);
    // The origin is asked for at each request: a dev facade's is known once it listens.
    origin = ORIGIN;
    expect((await challenge(unbound)).info.domain).toBe("gw.example");
    expect(nonces()).toBe(1);
  });

  it("serves one answer per nonce, even to two uses of one proof at once", async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    const header = await proof(await challenge(), wallet);
    const results = await Promise.allSettled([signIn().payer(header, PATH), signIn().payer(header, PATH)]);
    expect(results.filter((r) => r.status === "fulfilled").map((r) => r.value)).toEqual([wallet.address]);
    const [rejected] = results.filter((r) => r.status === "rejected");
    expect(errorInfo(rejected!.reason as ConnectError)?.reason).toBe("X402_SIGN_IN_REFUSED");
  });

  it("refuses a challenge answered after it expired", async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    const issued = Date.now() - SIGN_IN_TTL_MS - 1_000;
    const old = await challenge(signIn({ now: () => issued }));
    const refused = await refusal(signIn().payer(await proof(old, wallet), PATH));
    expect(refused).toMatchObject({ code: Code.Unauthenticated, reason: "X402_SIGN_IN_REFUSED" });
    expect(refused.message).toMatch(/too old|expired/);
  });

  it("never takes a dashboard sign-in nonce for a receipt challenge", async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    const extension = await challenge();
    await sessions.insertNonce("dashboardnonce12345678", Date.now() + 60_000);
    const header = await proof(extension, wallet, { nonce: "dashboardnonce12345678" });
    expect((await refusal(signIn().payer(header, PATH))).message).toMatch(/nonce is unknown/);
    // The dashboard's nonce is still there for the dashboard, unspent.
    expect(await sessions.useNonce("dashboardnonce12345678", Date.now())).toBe(true);
  });

  it("refuses a proof on a chain the gateway does not take", async () => {
    const wallet = privateKeyToAccount(generatePrivateKey());
    const header = await proof(await challenge(), wallet, { chainId: "eip155:1" });
    expect((await refusal(signIn().payer(header, PATH))).message).toMatch(/names chain eip155:1/);
  });

  it.runIf(solanaNetwork !== undefined)(
    "signs in a Solana wallet (SIWS, Ed25519) by its base58 address",
    async () => {
      const extension = await challenge();
      expect(extension.supportedChains).toContainEqual({ chainId: solanaNetwork, type: "ed25519" });
      // x402's fetch wrapper signs for the first network offered: EVM wallets are the common case.
      expect(extension.supportedChains[0]!.type).toBe("eip191");
      const wallet = await generateKeyPairSigner();
      const header = await proof(extension, wallet as unknown as SIWxSigner, {
        chainId: solanaNetwork!,
        type: "ed25519",
      });
      expect(await signIn().payer(header, PATH)).toBe(wallet.address);
      // The same proof names the wallet; another Solana key's signature over it does not pass.
      const other = await generateKeyPairSigner();
      const forged = JSON.parse(Buffer.from(header, "base64").toString()) as { address: string };
      const stolen = await proof(await challenge(), other as unknown as SIWxSigner, {
        chainId: solanaNetwork!,
        type: "ed25519",
      });
      const swapped = {
        ...(JSON.parse(Buffer.from(stolen, "base64").toString()) as object),
        address: forged.address,
      };
      const refused = await refusal(
        signIn().payer(Buffer.from(JSON.stringify(swapped)).toString("base64"), PATH),
      );
      expect(refused.message).toMatch(/signature verification failed/i);
    },
  );
});
