import { readdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { DEV_IMAGE_LABEL } from "../../src/dev/provider/dev-images.js";
import { pngSize, pngText } from "../helpers/image-fixtures.js";
import { cliJson, runCli, startGateway, tempDir } from "../helpers/process.js";

// `tollgate serve` exactly as the README's run command starts it: with no image provider
// configured, images come from the built-in dev upstream (Gemini format), clearly labelled.

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("serve on its embedded defaults", () => {
  it("generates a labelled image with the openai SDK, billed at the listed price, and says so at start", async () => {
    const dir = tempDir();
    cleanups.push(dir.cleanup);
    const env = { TOLLGATE_DATA_DIR: dir.path };
    const gateway = await startGateway(env);
    cleanups.push(() => gateway.stop("SIGKILL"));
    expect(gateway.stdout()).toMatch(
      /images: built-in dev upstream http:\/\/127\.0\.0\.1:\d+, generated labelled images/,
    );

    const account = await cliJson<{ id: string }>(["account", "create", "--name", "readme"], env);
    const key = await cliJson<{ secret: string }>(["key", "create", "--account", account.id], env);
    const credit = await runCli(
      ["credit", "--account", account.id, "--chain", "base", "--amount", "5", "--reason", "trial"],
      env,
    );
    expect(credit.code).toBe(0);

    const client = new OpenAI({ apiKey: key.secret, baseURL: `${gateway.facadeUrl}/v1`, maxRetries: 0 });
    const response = await client.images.generate({
      model: "image-pro",
      prompt: "a harbour",
      response_format: "url",
    });
    const stored = await fetch(response.data?.[0]?.url ?? "");
    expect(stored.status).toBe(200);
    const png = Buffer.from(await stored.arrayBuffer());
    expect(pngSize(png)).toEqual({ width: 1024, height: 1024 });
    expect(pngText(png).Comment).toBe(DEV_IMAGE_LABEL);
    // On SQLite (one host) the image is a file in the data directory, its bytes and its metadata.
    expect(
      readdirSync(join(dir.path, "images"))
        .map((name) => name.slice(64))
        .sort(),
    ).toEqual([".img", ".json"]);

    const balance = await cliJson<{ balances: { chain: { id: string }; available: string }[] }>(
      ["balance", "--account", account.id],
      env,
    );
    expect(BigInt(balance.balances.find((b) => b.chain.id === "base")!.available)).toBe(
      5_000_000n - 134_000n,
    );
    expect(await gateway.stop("SIGTERM")).toBe(0);
  });
});
