import { existsSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, expect, it } from "vitest";
import { newImageToken } from "../../src/core/images/image-tokens.js";
import { type EvmDevChain, startEvmDevChain } from "../../src/dev/chains/evm/dev-chain.js";
import { DEV_IMAGE_LABEL } from "../../src/dev/provider/dev-images.js";
import { type DevUpstream, startDevUpstream } from "../../src/dev/provider/dev-upstream.js";
import { auditPostgres } from "../../src/store/postgres/audit.js";
import { openPostgres } from "../../src/store/postgres/database.js";
import { writeChainsFile } from "../helpers/evm.js";
import { type Cleanups, cleanUp, cliAccount, type Host, ownDir, startHosts } from "../helpers/hosts.js";
import { pngSize, pngText } from "../helpers/image-fixtures.js";
import { type PostgresServer, startPostgres } from "../helpers/postgres.js";
import type { GatewayProcess } from "../helpers/process.js";

// `url` images with several hosts: two `tollgate serve` processes on one PostgreSQL, each with a
// data directory of its own, the image provider the dev stand-in speaking Gemini's format over a
// real socket. An image generated on one host is served by the other (a balancer may send the
// GET anywhere) until it expires, then by neither.

/** Short, so that the test sees the URLs expire (the smallest TOLLGATE_IMAGE_URL_TTL_S is 1). */
const TTL_S = 5;

let postgres: PostgresServer;
let upstream: DevUpstream;
let chain: EvmDevChain;
const hosts: Host[] = [];
const suite: Cleanups = [];
let databaseUrl: string;
let secret: string;
let accountId: string;

beforeAll(async () => {
  [postgres, chain] = await Promise.all([startPostgres(), startEvmDevChain({ id: "base", chainId: 8453 })]);
  upstream = await startDevUpstream({ host: "127.0.0.1", port: 0 });
  databaseUrl = await postgres.freshDatabase();
  const chainsFile = join(ownDir(suite), "chains.json");
  writeChainsFile(chainsFile, chain);
  const env = {
    TOLLGATE_DATABASE_URL: databaseUrl,
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    TOLLGATE_GEMINI_URL: upstream.url,
    TOLLGATE_GEMINI_API_KEY: "images-hosts-test-key",
    TOLLGATE_IMAGE_URL_TTL_S: String(TTL_S),
    TOLLGATE_CHAINS: chainsFile,
    TOLLGATE_DEV_CHAINS: "auto",
    TOLLGATE_MASTER_SECRET: "1e".repeat(32),
  };
  ({ id: accountId, secret } = await cliAccount(env, suite, "images-hosts", "5"));
  hosts.push(...(await startHosts(2, env, suite, { stopSignal: "SIGTERM" })));
}, 120_000);
afterAll(async () => {
  // The hosts stopped and the directories removed, last first.
  await cleanUp(suite);
  await upstream?.close();
  await Promise.all([postgres?.stop(), chain?.close()]);
});

/** The same path on another host: what a balancer in front of both does. */
function onHost(url: string, host: GatewayProcess): string {
  const { pathname } = new URL(url);
  return `${host.facadeUrl}${pathname}`;
}

it("serves an image generated on host 1 from host 2, the same bytes and type, until it expires on both", async () => {
  const [one, two] = [hosts[0]!, hosts[1]!];
  const client = new OpenAI({ apiKey: secret, baseURL: `${one.facadeUrl}/v1`, maxRetries: 0 });
  const response = await client.images.generate({
    model: "image-pro",
    prompt: "a lighthouse seen from either host",
    response_format: "url",
    size: "2K", // the gateway's sizes (docs/images.md)
  });
  // Stored before the answer went out: it expires at most TTL_S from now.
  const answered = Date.now();
  const url = response.data?.[0]?.url ?? "";
  expect(url).toMatch(/\/v1\/images\/files\/[A-Za-z0-9_-]{43}$/);

  const fromOne = await fetch(url);
  const fromTwo = await fetch(onHost(url, two));
  expect(fromOne.status).toBe(200);
  expect(fromTwo.status).toBe(200);
  expect(fromTwo.headers.get("content-type")).toBe("image/png");
  expect(fromTwo.headers.get("content-type")).toBe(fromOne.headers.get("content-type"));
  const [bytesOne, bytesTwo] = [
    Buffer.from(await fromOne.arrayBuffer()),
    Buffer.from(await fromTwo.arrayBuffer()),
  ];
  expect(bytesTwo.equals(bytesOne)).toBe(true);
  // The provider's image, whole: a 2K PNG with the stand-in's label.
  expect(pngSize(bytesTwo)).toEqual({ width: 2048, height: 2048 });
  expect(pngText(bytesTwo).Comment).toBe(DEV_IMAGE_LABEL);

  // Kept in the database the hosts share, not in either host's data directory.
  const pool = await openPostgres(databaseUrl, 1);
  try {
    const { rows } = await pool.query<{ n: number; bytes: number }>(
      "SELECT count(*)::int AS n, sum(octet_length(data))::int AS bytes FROM stored_images",
    );
    expect(rows[0]).toEqual({ n: 1, bytes: bytesOne.length });
    for (const host of hosts) expect(existsSync(join(host.dataDir, "images"))).toBe(false);

    // Past its expiry: 404 everywhere.
    await new Promise((resolve) => setTimeout(resolve, answered + TTL_S * 1000 + 100 - Date.now()));
    for (const host of [one, two]) {
      const expired = await fetch(onHost(url, host));
      expect(expired.status).toBe(404);
      expect(((await expired.json()) as { error: { code: string } }).error.code).toBe("image_not_found");
    }
    expect(await auditPostgres(pool)).toEqual([]);
  } finally {
    await pool.end();
  }
}, 60_000);

it("answers 404 on both hosts for a token that was never minted, altered or malformed", async () => {
  const client = new OpenAI({ apiKey: secret, baseURL: `${hosts[0]!.facadeUrl}/v1`, maxRetries: 0 });
  const response = await client.images.generate({
    model: "image-2",
    prompt: "a buoy",
    response_format: "url",
  });
  const url = response.data?.[0]?.url ?? "";
  const token = url.slice(url.lastIndexOf("/") + 1);
  // The live one is served by both: the refusals below are about the token, not the host.
  for (const host of hosts) expect((await fetch(onHost(url, host))).status).toBe(200);

  const altered = `${token.slice(0, -1)}${token.endsWith("A") ? "B" : "A"}`;
  for (const guess of [newImageToken(), altered, token.slice(0, 42), `${token}A`, "..%2F..%2Fetc%2Fpasswd"]) {
    for (const host of hosts) {
      const answer = await fetch(`${host.facadeUrl}/v1/images/files/${guess}`);
      expect(answer.status, guess).toBe(404);
      expect(((await answer.json()) as { error: { code: string } }).error.code).toBe("image_not_found");
    }
  }
}, 60_000);

it("replays an idempotent url call on host 2 with the token host 1 stored, served by host 2, charged once", async () => {
  const [one, two] = [hosts[0]!, hosts[1]!];
  const key = `images-hosts-${Date.now()}`;
  const call = (host: GatewayProcess) =>
    new OpenAI({ apiKey: secret, baseURL: `${host.facadeUrl}/v1`, maxRetries: 0 }).images
      .generate(
        { model: "image-2", prompt: "the same harbour twice", response_format: "url" },
        { headers: { "Idempotency-Key": key } },
      )
      .withResponse();
  const pool = await openPostgres(databaseUrl, 1);
  try {
    const holds = async () =>
      (await pool.query("SELECT count(*)::int AS n FROM holds WHERE account_id = $1", [accountId])).rows[0].n;
    const holdsBefore = await holds();
    const first = await call(one);
    const replay = await call(two);
    expect(first.response.headers.get("idempotent-replayed")).toBeNull();
    expect(replay.response.headers.get("idempotent-replayed")).toBe("true");
    // The same stored image: each host names it under its own origin (TOLLGATE_PUBLIC_URL).
    const url = first.data.data?.[0]?.url ?? "";
    const replayed = replay.data.data?.[0]?.url ?? "";
    expect(new URL(replayed).pathname).toBe(new URL(url).pathname);
    const [fromOne, fromTwo] = await Promise.all([fetch(url), fetch(replayed)]);
    expect([fromOne.status, fromTwo.status]).toEqual([200, 200]);
    const bytes = Buffer.from(await fromOne.arrayBuffer());
    expect(Buffer.from(await fromTwo.arrayBuffer()).equals(bytes)).toBe(true);
    // One hold for the two answers: the replay was not charged again.
    expect(await holds()).toBe(holdsBefore + 1);
    expect(await auditPostgres(pool)).toEqual([]);
  } finally {
    await pool.end();
  }
}, 60_000);
