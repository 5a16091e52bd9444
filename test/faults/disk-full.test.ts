import { execFileSync } from "node:child_process";
import {
  closeSync,
  mkdtempSync,
  openSync,
  readdirSync,
  rmdirSync,
  statfsSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import Anthropic from "@anthropic-ai/sdk";
import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import Database from "better-sqlite3";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type DevUpstream,
  type RecordedRequest,
  startDevUpstream,
} from "../../src/dev/provider/dev-upstream.js";
import { AuthService } from "../../src/gen/tollgate/auth/v1/auth_pb.js";
import { BillingService, HoldStatus } from "../../src/gen/tollgate/billing/v1/billing_pb.js";
import { IMAGES_DIR } from "../../src/store/shared/image-files.js";
import { auditLedger } from "../../src/store/sqlite/audit.js";
import { DATABASE_FILE } from "../../src/store/sqlite/database.js";
import { cookieOf, dashboardRpc } from "../dashboard/dashboard-rpc.js";
import { evmWallet, siweMessage } from "../dashboard/wallets.js";
import { type GatewayProcess, startGateway, until } from "../helpers/process.js";
import { expectedCharge } from "../helpers/text-gateway.js";

// The gateway as a real process, its data directory on a small tmpfs this test mounts (we run
// as root) and fills up with a filler file. While the disk is full: billed calls answer 503 in
// their own envelope and reach no provider; dashboard and key writes answer Connect
// `unavailable`; the process stays up and its health says storage is degraded. When the filler
// goes, calls succeed again and the ledger is sound. A settlement the full disk refuses after a
// stream was delivered is written once space returns (docs/store.md, "When the disk is full").

type AnthropicError = InstanceType<typeof Anthropic.APIError>;
type OpenAIError = InstanceType<typeof OpenAI.APIError>;

const ADMIN_TOKEN = "disk-full-operator-token-0123456789abcdef";
/** Hold age past which the sweeper voids a hold: short, so a sweep runs while the disk is full. */
const MAX_CALL_MS = 2_500;
const SWEEP_INTERVAL_MS = 200;
/** What the account is credited at the start, in µ$ (ledger units of `base`). */
const CREDITED = 10_000_000n;
const FULL_MESSAGE = /unavailable: its storage is full/;

let mount: string;
let mounted = false;
let upstream: DevUpstream;
let gateway: GatewayProcess;
let db: Database.Database;
let billing: Client<typeof BillingService>;
let auth: Client<typeof AuthService>;
let accountId: string;
let secret: string;
let anthropic: Anthropic;
let openai: OpenAI;
/** Runs when the stand-in provider receives a request (e.g. fills the disk after the hold). */
let onProviderRequest: ((request: RecordedRequest) => void) | undefined;

beforeAll(async () => {
  mount = mkdtempSync(join(tmpdir(), "tollgate-disk-full-"));
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=24m", "tmpfs", mount]);
  mounted = true;
  upstream = await startDevUpstream({
    script: (request) => {
      onProviderRequest?.(request);
      return undefined;
    },
  });
  await startOurGateway();
  const { account } = await auth.createAccount({ name: "disk-full" });
  accountId = account!.id;
  ({ secret } = await auth.createKey({ accountId, name: "disk-full-key" }));
  await billing.credit({ accountId, chain: "base", amount: CREDITED, reason: "test funds" });
  sdkClients();
  db = new Database(join(mount, DATABASE_FILE), { fileMustExist: true });
});

afterAll(async () => {
  // Each step on its own: the tmpfs is unmounted even when an earlier one fails.
  const steps: (() => unknown)[] = [
    () => gateway?.stop("SIGKILL"),
    () => upstream?.close(),
    () => db?.close(),
    () => mounted && execFileSync("umount", [mount]),
    () => mount && rmdirSync(mount),
  ];
  for (const step of steps) {
    try {
      await step();
    } catch (error) {
      console.error("disk-full cleanup:", error);
    }
  }
});

/** Starts `tollgate dev` on the tmpfs, and points the test's clients at it. */
async function startOurGateway(): Promise<void> {
  gateway = await startGateway({
    TOLLGATE_DATA_DIR: mount,
    TOLLGATE_ANTHROPIC_URL: upstream.url,
    TOLLGATE_GEMINI_URL: upstream.url,
    TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
    TOLLGATE_MAX_CALL_MS: String(MAX_CALL_MS),
    TOLLGATE_HOLD_SWEEP_INTERVAL_MS: String(SWEEP_INTERVAL_MS),
    // Health is checked in the background (issue 29): often, so that the test sees it change.
    TOLLGATE_HEALTH_INTERVAL_S: "1",
  });
  const transport = createConnectTransport({
    baseUrl: gateway.coreUrl,
    httpVersion: "2",
    interceptors: [
      (next) => (request) => {
        request.header.set("authorization", `Bearer ${ADMIN_TOKEN}`);
        return next(request);
      },
    ],
  });
  billing = createClient(BillingService, transport);
  auth = createClient(AuthService, transport);
}

/** The official SDKs with the account's key, on the running gateway (no retries: we count). */
function sdkClients(): void {
  anthropic = new Anthropic({ baseURL: gateway.facadeUrl, apiKey: secret, maxRetries: 0 });
  openai = new OpenAI({ baseURL: `${gateway.facadeUrl}/v1`, apiKey: secret, maxRetries: 0 });
}

const FILLER = () => join(mount, "filler");

/**
 * Fills the tmpfs to the last byte. The WAL is truncated first: otherwise SQLite would go on
 * writing into WAL pages it allocated before, and the first writes would still fit.
 */
function fillDisk(): void {
  db.pragma("wal_checkpoint(TRUNCATE)");
  const fd = openSync(FILLER(), "a");
  try {
    for (const size of [1 << 20, 4096, 1]) {
      const chunk = Buffer.alloc(size);
      try {
        for (;;) writeSync(fd, chunk);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
      }
    }
  } finally {
    closeSync(fd);
  }
  expect(statfsSync(mount).bavail).toBe(0);
}

function freeDisk(): void {
  unlinkSync(FILLER());
}

function expectAlive(): void {
  expect(gateway.child.exitCode).toBeNull();
  expect(gateway.child.signalCode).toBeNull();
}

async function available(): Promise<bigint> {
  const { balances } = await billing.getBalances({ accountId });
  return balances.find((b) => b.chain?.id === "base")?.available ?? 0n;
}

async function usageRows() {
  return (await billing.listUsage({ accountId, pageSize: 1000 })).rows;
}

/** The ledger's invariants (conservation included), read from the gateway's own database file. */
function expectSoundLedger(): void {
  expect(auditLedger(db)).toEqual([]);
}

/** Every charge recorded: balance = credited − sum of settled amounts, and no hold left open. */
async function expectChargesAccounted(credited: bigint): Promise<void> {
  const rows = await usageRows();
  expect(rows.filter((r) => r.status === HoldStatus.PENDING)).toEqual([]);
  const charged = rows.reduce((sum, r) => sum + r.amount, 0n);
  expect(await available()).toBe(credited - charged);
}

const HELLO = { role: "user" as const, content: "hello" };

async function expectUnavailable(call: Promise<unknown>): Promise<AnthropicError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(Anthropic.APIError);
  const api = error as AnthropicError;
  expect(api.status).toBe(503);
  expect(api.headers?.get("x-request-id")).toMatch(/^req_/);
  return api;
}

describe("with the data directory's disk full", () => {
  it("billed calls answer 503 in their own envelope, reach no provider, and the process stays up", async () => {
    const before = await anthropic.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 16,
      messages: [HELLO],
    });
    expect(before.content.length).toBeGreaterThan(0);

    const funds = await available();
    fillDisk();
    try {
      const forwarded = upstream.requests.length;

      const plain = await expectUnavailable(
        anthropic.messages.create({ model: "model-haiku-4-5", max_tokens: 16, messages: [HELLO] }),
      );
      expect(plain.error).toMatchObject({ type: "error", error: { type: "api_error" } });
      const message = (plain.error as { error: { message: string } }).error.message;
      expect(message).toMatch(FULL_MESSAGE);
      expect(message).not.toContain(mount);
      expect(plain.headers?.get("retry-after")).toMatch(/^\d+$/);

      await expectUnavailable(
        anthropic.messages.create({
          model: "model-haiku-4-5",
          max_tokens: 16,
          messages: [HELLO],
          stream: true,
        }),
      );

      const image = await openai.images
        .generate({ model: "image-pro", prompt: "a harbour", response_format: "b64_json" })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(image).toBeInstanceOf(OpenAI.APIError);
      expect((image as OpenAIError).status).toBe(503);
      expect((image as OpenAIError).headers?.get("x-request-id")).toMatch(/^req_/);
      expect((image as OpenAIError).error).toMatchObject({
        type: "server_error",
        code: "storage_full",
        message: expect.stringMatching(FULL_MESSAGE),
      });

      // Nothing reached the provider without a durable hold, and nothing was charged or held.
      expect(upstream.requests.length).toBe(forwarded);
      expect(await available()).toBe(funds);

      // The next background round of health checks sees the full disk.
      const { health, report } = await until("health to report the full disk", async () => {
        const health = await fetch(`${gateway.facadeUrl}/v1/health`);
        const report = (await health.json()) as {
          status: string;
          dependencies: { name: string; ok: boolean }[];
        };
        return report.status === "ok" ? undefined : { health, report };
      });
      expect(health.status).toBe(200);
      expect(report.status).toBe("degraded");
      expect(report.dependencies).toContainEqual(expect.objectContaining({ name: "storage", ok: false }));
      expect(JSON.stringify(report)).not.toContain(mount);
      expectAlive();
    } finally {
      freeDisk();
    }

    const after = await anthropic.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 16,
      messages: [HELLO],
    });
    expect(after.content.length).toBeGreaterThan(0);
    const stream = await anthropic.messages
      .stream({ model: "model-haiku-4-5", max_tokens: 16, messages: [HELLO] })
      .finalMessage();
    expect(stream.stop_reason).not.toBeNull();
    const image = await openai.images.generate({
      model: "image-pro",
      prompt: "a harbour",
      response_format: "url",
    });
    expect(image.data?.[0]?.url).toBeTruthy();
    await until("health to report the disk free again", async () => {
      const health = await fetch(`${gateway.facadeUrl}/v1/health`);
      return ((await health.json()) as { status: string }).status === "ok" ? true : undefined;
    });
    expectSoundLedger();
    await expectChargesAccounted(CREDITED);
  });

  it("sign-in, dashboard and key writes answer Connect unavailable, and work again once space returns", async () => {
    const base = gateway.facadeUrl;
    const where = { domain: new URL(base).host, origin: base };
    const wallet = evmWallet();
    const signIn = async (nonce: string) => {
      const message = siweMessage(wallet.address, { ...where, nonce });
      const signature = await wallet.signMessage({ message });
      return dashboardRpc(base, "AuthService/SignIn", {
        family: "WALLET_FAMILY_EVM",
        message,
        signature,
        link: false,
      });
    };
    const firstNonce = (await dashboardRpc(base, "AuthService/CreateSignInNonce", {})).body.nonce as string;
    const session = await signIn((await dashboardRpc(base, "AuthService/CreateSignInNonce", {})).body.nonce);
    expect(session.status).toBe(200);
    const cookie = cookieOf(session.setCookie);
    const csrf = session.body.csrfToken as string;

    fillDisk();
    try {
      const nonce = await dashboardRpc(base, "AuthService/CreateSignInNonce", {});
      expect(nonce.status).toBe(503);
      expect(nonce.body).toMatchObject({ code: "unavailable", message: expect.stringMatching(FULL_MESSAGE) });
      const refused = await signIn(firstNonce);
      expect(refused.status).toBe(503);
      expect(refused.body.code).toBe("unavailable");
      const key = await dashboardRpc(base, "AuthService/CreateKey", { name: "while full" }, { cookie, csrf });
      expect(key.status).toBe(503);
      expect(key.body.code).toBe("unavailable");
      // Reads still answer: the dashboard shows what is there.
      const session = await dashboardRpc(base, "AuthService/GetSession", {}, { cookie, csrf });
      expect(session.status).toBe(200);
      // The operator's own writes too, over the core's port.
      const operator = await auth.createKey({ accountId, name: "while full" }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(operator).toBeInstanceOf(ConnectError);
      expect((operator as ConnectError).code).toBe(Code.Unavailable);
      expectAlive();
    } finally {
      freeDisk();
    }

    // The nonce the full disk could not spend is still good.
    expect((await signIn(firstNonce)).status).toBe(200);
    const key = await dashboardRpc(base, "AuthService/CreateKey", { name: "after" }, { cookie, csrf });
    expect(key.status).toBe(200);
    expectSoundLedger();
  });

  it("a settle the full disk refuses after a stream was delivered is written once space returns, by the usual rule", async () => {
    const start = await available();
    onProviderRequest = (request) => {
      // The hold is durable by now: the disk fills while the provider answers.
      if (request.path.startsWith("/v1/messages") && !request.path.includes("count_tokens")) fillDisk();
    };
    let message: Anthropic.Message;
    try {
      message = await anthropic.messages
        .stream({ model: "model-haiku-4-5", max_tokens: 32, messages: [HELLO] })
        .finalMessage();
    } finally {
      onProviderRequest = undefined;
    }
    try {
      expect(message.stop_reason).toBe("end_turn");
      // Past the longest call, with sweeps running: the hold stays open while its settlement waits.
      await sleep(MAX_CALL_MS + 3 * SWEEP_INTERVAL_MS);
      const [row] = await usageRows();
      expect(row!.status).toBe(HoldStatus.PENDING);
      expectAlive();
    } finally {
      freeDisk();
    }
    const settled = await until("the kept settlement to be written", async () => {
      const [row] = await usageRows();
      return row!.status === HoldStatus.PENDING ? undefined : row;
    });
    expect(settled.status).toBe(HoldStatus.SETTLED);
    const charge = expectedCharge("model-haiku-4-5", {
      input: message.usage.input_tokens,
      output: message.usage.output_tokens,
    });
    expect(settled.amount).toBe(charge);
    expect(await available()).toBe(start - charge);
    expectSoundLedger();
    await expectChargesAccounted(CREDITED);
  });

  it("a non-streaming answer whose settle the full disk refuses is not delivered and not charged", async () => {
    const start = await available();
    const forwarded = upstream.messageRequests().length;
    onProviderRequest = (request) => {
      if (request.path.startsWith("/v1/messages")) fillDisk();
    };
    try {
      const refused = await expectUnavailable(
        anthropic.messages.create({ model: "model-haiku-4-5", max_tokens: 16, messages: [HELLO] }),
      );
      expect(refused.message).toMatch(FULL_MESSAGE);
      // The provider answered (after the hold was durable); the caller got nothing and pays nothing.
      expect(upstream.messageRequests().length).toBe(forwarded + 1);
    } finally {
      onProviderRequest = undefined;
      freeDisk();
    }
    const released = await until("the kept release to be written", async () => {
      const [row] = await usageRows();
      return row!.status === HoldStatus.PENDING ? undefined : row;
    });
    // Released by the kept release, not left to the sweeper.
    expect(released.status).toBe(HoldStatus.RELEASED);
    expect(released.amount).toBe(0n);
    expect(await available()).toBe(start);
    expectSoundLedger();
    await expectChargesAccounted(CREDITED);
  });

  // A `url` image is refused when its file cannot be written; a `b64_json` one when its settle
  // cannot. Either way the caller gets no image and pays nothing (the provider was paid by us).
  it.each([
    { format: "url", message: /^The image could not be stored; nothing was charged\. .*storage is full/ },
    { format: "b64_json", message: FULL_MESSAGE },
  ] as const)(
    "an image the full disk cannot take ($format) is not charged, and its hold is released once space returns",
    async ({ format, message }) => {
      const start = await available();
      const forwarded = upstream.requests.length;
      onProviderRequest = (request) => {
        if (request.path.includes(":generateContent")) fillDisk();
      };
      try {
        const refused = await openai.images
          .generate({ model: "image-pro", prompt: "a harbour", response_format: format })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect(refused).toBeInstanceOf(OpenAI.APIError);
        expect((refused as OpenAIError).status).toBe(503);
        expect((refused as OpenAIError).error).toMatchObject({
          type: "server_error",
          code: "storage_full",
          message: expect.stringMatching(message),
        });
        expect(upstream.requests.length).toBe(forwarded + 1);
        // Nothing half-written is left taking space: every image file is whole, with its metadata.
        const files = readdirSync(join(mount, IMAGES_DIR));
        for (const name of files) expect(name).toMatch(/^[0-9a-f]{64}\.(img|json)$/);
        expect(files.filter((n) => n.endsWith(".img")).length).toBe(
          files.filter((n) => n.endsWith(".json")).length,
        );
      } finally {
        onProviderRequest = undefined;
        freeDisk();
      }
      const released = await until("the image call's hold to be resolved", async () => {
        const [row] = await usageRows();
        return row!.status === HoldStatus.PENDING ? undefined : row;
      });
      expect(released.status).toBe(HoldStatus.RELEASED);
      expect(released.amount).toBe(0n);
      expect(await available()).toBe(start);
      expectSoundLedger();
      await expectChargesAccounted(CREDITED);
    },
  );

  it("the gateway stops cleanly on a full disk, starts on it, and serves once space returns", async () => {
    fillDisk();
    try {
      expect(await gateway.stop("SIGTERM")).toBe(0);
      await startOurGateway();
      sdkClients();
      const forwarded = upstream.requests.length;
      await expectUnavailable(
        anthropic.messages.create({ model: "model-haiku-4-5", max_tokens: 16, messages: [HELLO] }),
      );
      expect(upstream.requests.length).toBe(forwarded);
    } finally {
      freeDisk();
    }
    const after = await anthropic.messages.create({
      model: "model-haiku-4-5",
      max_tokens: 16,
      messages: [HELLO],
    });
    expect(after.content.length).toBeGreaterThan(0);
    expectSoundLedger();
    await expectChargesAccounted(CREDITED);
  });
});
