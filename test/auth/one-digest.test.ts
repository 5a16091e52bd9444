/**
 * Issue 30, item 4: a keyed call parses its key once and hashes it once. The facade's
 * authentication hook parses the credential and hands it to the in-process core with the
 * Authenticate RPC, so the key lookup and both known-credentials records (the facade's and the
 * core's throttle's) share one SHA-256; later RPCs of the request take the authenticated caller
 * as a context value and hash nothing. This counts the SHA-256 hashes of the key itself.
 */
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { InferenceService } from "../../src/gen/tollgate/inference/v1/inference_pb.js";
import { accountWithKey, startTestGateway, type TestGateway } from "../helpers/app.js";

/** Every SHA-256 input hashed in this process, as text. */
const hashed = vi.hoisted(() => [] as string[]);

vi.mock("node:crypto", async (importOriginal) => {
  const crypto = await importOriginal<typeof import("node:crypto")>();
  const createHash = ((algorithm: string, options?: unknown) => {
    const hash = crypto.createHash(algorithm, options as never);
    if (algorithm !== "sha256") return hash;
    const update = hash.update.bind(hash);
    hash.update = ((data: unknown, encoding?: unknown) => {
      if (typeof data === "string") hashed.push(data);
      return update(data as never, encoding as never);
    }) as typeof hash.update;
    return hash;
  }) as typeof crypto.createHash;
  return { ...crypto, default: { ...crypto, createHash }, createHash };
});

let upstream: DevUpstream;
let gw: TestGateway;
let key: Awaited<ReturnType<typeof accountWithKey>>;

beforeAll(async () => {
  upstream = await startDevUpstream();
  gw = await startTestGateway({ TOLLGATE_ANTHROPIC_URL: upstream.url });
  key = await accountWithKey(gw.operator, "one-digest");
});

afterAll(async () => {
  await gw.close();
  await upstream.close();
});

/** How many times `secret` is hashed while `call` runs. */
async function digestsOf(secret: string, call: () => Promise<unknown>): Promise<number> {
  const from = hashed.length;
  await call();
  return hashed.slice(from).filter((input) => input === secret).length;
}

describe("a keyed call hashes its key once", () => {
  it("through the facade, with the core in process (listing models: authentication and one RPC)", async () => {
    const models = () =>
      fetch(`${gw.facadeUrl}/v1/models`, { headers: { "x-api-key": key.secret } }).then((r) => {
        expect(r.status).toBe(200);
        return r.text();
      });
    await models();
    expect(await digestsOf(key.secret, models)).toBe(1);
    expect(await digestsOf(key.secret, models)).toBe(1);
  });

  it("through the facade, with the core in process (a message call that reaches the core's parse)", async () => {
    const message = () =>
      fetch(`${gw.facadeUrl}/v1/messages`, {
        method: "POST",
        headers: { authorization: `Bearer ${key.secret}`, "content-type": "application/json" },
        body: "{}",
      }).then((r) => {
        expect(r.status).toBe(400);
        return r.text();
      });
    expect(await digestsOf(key.secret, message)).toBe(1);
  });

  it("on the core's port, where a client's key arrives in the RPC's metadata", async () => {
    const transport = createConnectTransport({ baseUrl: gw.coreUrl, httpVersion: "2" });
    const inference = createClient(InferenceService, transport);
    const list = () => inference.listModels({}, { headers: { "x-api-key": key.secret } });
    await list();
    expect(await digestsOf(key.secret, list)).toBe(1);
  });
});
