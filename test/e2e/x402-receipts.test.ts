import { request as httpRequest } from "node:http";
import { x402Client } from "@x402/core/client";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import type { Network } from "@x402/core/types";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme as ExactClient } from "@x402/evm/exact/client";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import {
  type CompleteSIWxInfo,
  createSIWxMessage,
  createSIWxPayload,
  encodeSIWxHeader,
  SIGN_IN_WITH_X,
  type SIWxExtension,
  type SIWxPayload,
  wrapFetchWithSIWx,
} from "@x402/extensions/sign-in-with-x";
import { wrapFetchWithPayment } from "@x402/fetch";
import { compactVerify, importJWK, type JWK } from "jose";
import { type Address, createPublicClient, getAddress, http } from "viem";
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eip3009Abi } from "../../src/chains/evm/evm-adapter.js";
import { readDevChainsFile, requestFaucet } from "../../src/dev/chains/dev-chains-file.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { openDatabase } from "../../src/store/sqlite/database.js";
import { type GatewayProcess, startGateway, tempDir, until } from "../helpers/process.js";

// Keyless receipts (docs/receipts.md, issue 29 item 10): a call paid with x402 has no key, so its
// receipt is served at the x402 door only to the wallet that paid, proven with x402's own
// sign-in-with-x (wrapFetchWithSIWx from @x402/extensions on the client). Real `tollgate dev`
// process, real dev chains, x402's own clients; hostile callers try another wallet, a replayed
// proof, a bare `?payer=` and a proof signed for another site.

/** The one route a keyless call is paid on here, on x402's door. */
const PAID_PATH = "/x402/v1/messages";
const RECEIPTS = "/x402/v1/receipts";
const NETWORK = "eip155:8453" as Network;

let dir: ReturnType<typeof tempDir>;
let gateway: GatewayProcess;
let base: string;
let token: Address;
let rpcUrl: string;
const payer = privateKeyToAccount(generatePrivateKey());
const stranger = privateKeyToAccount(generatePrivateKey());
/** The request id of the call the payer paid. */
let paidCall = "";

const balanceOf = async (address: Address): Promise<bigint> =>
  await createPublicClient({ transport: http(rpcUrl) }).readContract({
    address: token,
    abi: eip3009Abi,
    functionName: "balanceOf",
    args: [address],
  });

beforeAll(async () => {
  dir = tempDir();
  // The built-in dev upstream answers text; only the chains are asked for.
  gateway = await startGateway({ TOLLGATE_DATA_DIR: dir.path, TOLLGATE_DEV_CHAINS: "on" }, 60_000);
  base = gateway.facadeUrl;
  const dev = readDevChainsFile(dir.path)!;
  const chain = dev.registry.byId.get("base")!;
  token = getAddress(chain.asset.address);
  rpcUrl = chain.rpcUrl;
  await requestFaucet(dev.faucetUrl, "base", payer.address, 5_000_000n);
  await until("the payer's test funds", async () =>
    (await balanceOf(payer.address)) === 5_000_000n ? true : undefined,
  );
  const signer = toClientEvmSigner(payer, createPublicClient({ transport: http(rpcUrl) }));
  const client = new x402Client()
    .register(NETWORK, new ExactClient(signer))
    .register(NETWORK, new UptoClient(signer, { rpcUrl }))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: token }] });
  const paid = await wrapFetchWithPayment(fetch, client)(`${base}${PAID_PATH}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "claude-haiku-4-5",
      max_tokens: 64,
      messages: [{ role: "user", content: "a receipt, please" }],
    }),
  });
  expect(paid.status, await paid.clone().text()).toBe(200);
  paidCall = paid.headers.get("request-id")!;
  expect(paidCall).toMatch(/^req_/);
}, 120_000);

afterAll(async () => {
  await gateway?.stop("SIGTERM");
  if (dir !== undefined) {
    const db = openDatabase(dir.path);
    try {
      expect(auditLedger(db)).toEqual([]);
    } finally {
      db.close();
    }
    dir.cleanup();
  }
});

/** The receipt route of the paid call at the x402 door. */
const receiptUrl = (requestId = paidCall) => `${base}${RECEIPTS}/${requestId}`;

/** A fetch that records the SIGN-IN-WITH-X header of each request it sends. */
function recordingFetch(sent: string[]): typeof fetch {
  return async (input, init) => {
    const request = new Request(input, init);
    const proof = request.headers.get(SIGN_IN_WITH_X);
    if (proof !== null) sent.push(proof);
    return await fetch(request);
  };
}

/** A fresh challenge for `url`: the 402 and its sign-in-with-x declaration. */
async function challenge(url = receiptUrl()): Promise<{ response: Response; extension: SIWxExtension }> {
  const response = await fetch(url);
  expect(response.status).toBe(402);
  const required = decodePaymentRequiredHeader(response.headers.get("payment-required")!);
  return { response, extension: required.extensions![SIGN_IN_WITH_X] as SIWxExtension };
}

/** The challenge's info on the base network, with `changes` applied (a forger's edits). */
function onBase(extension: SIWxExtension, changes: Partial<CompleteSIWxInfo> = {}): CompleteSIWxInfo {
  return { ...extension.info, chainId: NETWORK, type: "eip191", ...changes };
}

/** Sends a hand-made proof and returns the answer. */
async function withProof(proof: SIWxPayload, url = receiptUrl()) {
  return await fetch(url, { headers: { [SIGN_IN_WITH_X]: encodeSIWxHeader(proof) } });
}

/** The signed payload of a receipt answer, verified with the gateway's published key (jose). */
async function verifiedReceipt(response: Response): Promise<Record<string, unknown>> {
  expect(response.status, await response.clone().text()).toBe(200);
  const { format, signature } = (await response.json()) as { format: string; signature: string };
  expect(format).toBe("jws");
  const { keys } = (await (await fetch(`${base}/.well-known/jwks.json`)).json()) as { keys: JWK[] };
  const { payload } = await compactVerify(signature, await importJWK({ ...keys[0]!, alg: "EdDSA" }));
  return JSON.parse(new TextDecoder().decode(payload)) as Record<string, unknown>;
}

/**
 * A proof of `info` signed by `account` without the client's own origin check (a forger's
 * tool): the message the gateway will rebuild from the fields, signed with the account's key.
 */
async function signedAnyway(info: CompleteSIWxInfo, account: PrivateKeyAccount): Promise<SIWxPayload> {
  const signature = await account.signMessage({ message: createSIWxMessage(info, account.address) });
  return { ...info, address: account.address, signature };
}

/** The Anthropic envelope of a refusal, its status checked. */
async function refusal(response: Response, status: number): Promise<string> {
  const body = (await response.json()) as { type: string; error: { message: string }; signature?: string };
  expect(response.status, body.error?.message).toBe(status);
  expect(body.type).toBe("error");
  expect(body).not.toHaveProperty("signature");
  expect(response.headers.get("x-request-id")).toMatch(/^req_/);
  return body.error.message;
}

describe("a keyless call's receipt, for the wallet that paid", () => {
  it("challenges a caller without a proof: a 402 declaring sign-in-with-x, bound to the gateway's own origin", async () => {
    const { response, extension } = await challenge();
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    const { info, supportedChains } = extension;
    expect(info.domain).toBe(new URL(base).host);
    expect(info.uri).toBe(receiptUrl());
    expect(info.nonce).toMatch(/^[0-9a-f]{32}$/);
    expect(Date.parse(info.expirationTime!) - Date.parse(info.issuedAt)).toBe(300_000);
    expect(supportedChains).toContainEqual({ chainId: NETWORK, type: "eip191" });
    // A second challenge has a nonce of its own.
    expect((await challenge()).extension.info.nonce).not.toBe(info.nonce);
    // The Host a caller sends does not move the domain a proof must name.
    const spoofed = await new Promise<string>((resolve, reject) => {
      const url = new URL(receiptUrl());
      httpRequest(
        { host: url.hostname, port: url.port, path: url.pathname, headers: { host: "evil.example" } },
        (res) => {
          res.resume();
          resolve(res.headers["payment-required"] as string);
        },
      )
        .on("error", reject)
        .end();
    });
    const spoofedInfo = (decodePaymentRequiredHeader(spoofed).extensions![SIGN_IN_WITH_X] as SIWxExtension)
      .info;
    expect(spoofedInfo.domain).toBe(new URL(base).host);
    expect(spoofedInfo.uri).toBe(receiptUrl());
  });

  it("(a) serves the payer, signed in with wrapFetchWithSIWx, its receipt, which verifies", async () => {
    const receipt = await verifiedReceipt(await wrapFetchWithSIWx(fetch, payer)(receiptUrl()));
    expect(receipt).toMatchObject({
      requestId: paidCall,
      payer: payer.address.toLowerCase(),
      accountId: `acct_x402_${payer.address.toLowerCase()}`,
      chain: "base",
      network: NETWORK,
      x402: { scheme: "upto" },
    });
    expect(receipt).not.toHaveProperty("keyId");
    // The x402 door ignores an API key: a bogus one neither refuses the payer nor stands in for a proof.
    const bogus = { "x-api-key": `tg_${"0".repeat(60)}` };
    expect(
      (await verifiedReceipt(await wrapFetchWithSIWx(fetch, payer)(receiptUrl(), { headers: bogus })))
        .requestId,
    ).toBe(paidCall);
    expect(await refusal(await fetch(receiptUrl(), { headers: bogus }), 402)).toMatch(/sign the challenge/);
  });

  it("(b) refuses another wallet's proof, and a proof naming the payer signed by another wallet", async () => {
    // A stranger's own, valid proof: it proves the stranger, who paid no such call.
    const other = await wrapFetchWithSIWx(fetch, stranger)(receiptUrl());
    expect(await refusal(other, 403)).toMatch(/paid no call with request id/);
    // The stranger claims the payer's address: the signature is not the payer's.
    const { extension } = await challenge();
    const forged = await createSIWxPayload(
      onBase(extension),
      forgingSigner(stranger, payer.address),
      receiptUrl(),
    );
    expect(forged.address).toBe(payer.address);
    expect(await refusal(await withProof(forged), 401)).toMatch(/Signature verification failed/);
  });

  it("(c) refuses a replayed proof: a nonce answers once", async () => {
    const sent: string[] = [];
    await verifiedReceipt(await wrapFetchWithSIWx(recordingFetch(sent), payer)(receiptUrl()));
    expect(sent).toHaveLength(1);
    const replayed = await fetch(receiptUrl(), { headers: { [SIGN_IN_WITH_X]: sent[0]! } });
    expect(await refusal(replayed, 401)).toMatch(/nonce is unknown, used already or expired/);
    // A nonce the gateway never issued, however well signed, is refused the same way.
    const { extension } = await challenge();
    const invented = await createSIWxPayload(
      onBase(extension, { nonce: "0123456789abcdef0123456789abcdef" }),
      payer,
      receiptUrl(),
    );
    expect(await refusal(await withProof(invented), 401)).toMatch(/nonce is unknown/);
    // And a proof for one receipt does not open another: it is bound to the resource it was issued for.
    const elsewhere = await createSIWxPayload(onBase(extension), payer, receiptUrl());
    expect(await refusal(await withProof(elsewhere, receiptUrl("req_someoneelse")), 401)).toMatch(
      /signed for .* not /,
    );
  });

  it("(d) reveals nothing for a bare ?payer=: the keyed door asks for a key and points at the x402 door", async () => {
    const keyed = await fetch(`${base}/v1/receipts/${paidCall}?payer=${payer.address}`);
    expect(await refusal(keyed, 401)).toMatch(/No API key.*\/x402\/v1\/receipts\/\{request_id\}/);
    const bare = await fetch(`${base}/v1/receipts/${paidCall}`);
    expect(await refusal(bare, 401)).toMatch(/\/x402\/v1\/receipts/);
    // At the x402 door the address is no proof either: a challenge, no receipt.
    const atDoor = await fetch(`${receiptUrl()}?payer=${payer.address}`);
    expect(await refusal(atDoor, 402)).toMatch(/sign the challenge/);
    expect(atDoor.headers.get("payment-required")).not.toBeNull();
  });

  it("(e) refuses a proof the payer signed for another site, even on a nonce the gateway issued", async () => {
    // A phishing site relays the gateway's challenge under its own name and gets the payer to sign.
    const { extension } = await challenge();
    const phished = `https://evil.example${RECEIPTS}/${paidCall}`;
    const proof = await createSIWxPayload(
      onBase(extension, { domain: "evil.example", uri: phished, resources: [phished] }),
      payer,
      phished,
    );
    expect(await refusal(await withProof(proof), 401)).toMatch(/Domain mismatch/);
    // Same host, another scheme or port: the uri's origin must be the gateway's own.
    const otherPort = `http://${new URL(base).hostname}:1${RECEIPTS}/${paidCall}`;
    const moved = await signedAnyway(onBase(extension, { uri: otherPort }), payer);
    expect(await refusal(await withProof(moved), 401)).toMatch(/URI mismatch/);
    // The nonce was never spent by the refusals: the payer's own proof on it still works.
    const honest = await createSIWxPayload(onBase(extension), payer, receiptUrl());
    expect((await verifiedReceipt(await withProof(honest))).requestId).toBe(paidCall);
  });

  it("refuses a malformed proof with a 401 naming the problem", async () => {
    const garbage = await fetch(receiptUrl(), { headers: { [SIGN_IN_WITH_X]: "not base64 at all!" } });
    expect(await refusal(garbage, 401)).toMatch(/Invalid SIWX header/);
    const incomplete = Buffer.from(JSON.stringify({ domain: new URL(base).host })).toString("base64");
    expect(
      await refusal(await fetch(receiptUrl(), { headers: { [SIGN_IN_WITH_X]: incomplete } }), 401),
    ).toMatch(/Invalid SIWX header: .*address/);
  });
});

/** A signer that names `claimed` as its address but signs with `account`'s key. */
function forgingSigner(account: PrivateKeyAccount, claimed: string) {
  return {
    address: claimed,
    signMessage: ({ message }: { message: string }) => account.signMessage({ message }),
  };
}
