import OpenAI, { toFile } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/config.js";
import { openRuntime, type Runtime } from "../../src/runtime/runtime.js";
import { pngSize, smallPng } from "../helpers/image-fixtures.js";
import { tempDir } from "../helpers/process.js";
import { startTextGateway, type TextGateway } from "../helpers/text-gateway.js";

// A facade-only tier (TOLLGATE_CORE_URL) in front of the core over gRPC: edits far above gRPC's
// usual 4 MiB message size cross it, `url` images are fetched through it, and a per-key rate
// limit on image calls answers 429 before anything is held.

let t: TextGateway;
let tier: Runtime;
let tierUrl: string;
let dir: ReturnType<typeof tempDir>;

beforeAll(async () => {
  t = await startTextGateway((upstream) => ({ TOLLGATE_GEMINI_URL: upstream, TOLLGATE_RATE_LIMIT_RPM: "4" }));
  await t.credit(2_000_000n);
  dir = tempDir();
  tier = await openRuntime(
    loadConfig({ TOLLGATE_CORE_URL: t.gateway.coreUrl, TOLLGATE_DATA_DIR: dir.path }),
    { mode: "embedded" },
  );
  tierUrl = await tier.facade!.listen({ host: "127.0.0.1", port: 0 });
});
afterAll(async () => {
  if (tier !== undefined) await tier.close(2_000);
  dir?.cleanup();
  await t?.close();
});

describe("images through a facade-only tier", () => {
  it("edits with 3 × 3 MiB references and serves the url image through the tier", async () => {
    const client = new OpenAI({ apiKey: t.secret, baseURL: `${tierUrl}/v1`, maxRetries: 0 });
    const big = (seed: string) => Buffer.concat([smallPng(32, 32, seed), Buffer.alloc(3 * 1024 * 1024, 7)]);
    const response = await client.images.edit({
      model: "image-pro",
      prompt: "three big ones",
      image: [
        await toFile(big("a"), "a.png"),
        await toFile(big("b"), "b.png"),
        await toFile(big("c"), "c.png"),
      ],
      response_format: "url",
    });
    const url = response.data?.[0]?.url ?? "";
    expect(url.startsWith(`${tierUrl}/v1/images/files/`)).toBe(true);
    const image = await fetch(url);
    expect(image.status).toBe(200);
    expect(pngSize(Buffer.from(await image.arrayBuffer()))).toEqual({ width: 1024, height: 1024 });
    const sent = t.upstream.requests.at(-1)?.body as {
      contents: { parts: { inlineData?: { data: string } }[] }[];
    };
    expect(sent.contents[0]?.parts[1]?.inlineData?.data).toBe(big("a").toString("base64"));
    expect((await t.usage())[0]).toMatchObject({ model: "image-pro", amount: 134_000n });
    t.expectSoundLedger();
  });

  it("answers 429 with retry-after past the key's rate, charging nothing and calling no provider", async () => {
    const client = new OpenAI({ apiKey: t.secret, baseURL: `${tierUrl}/v1`, maxRetries: 0 });
    const outcomes: number[] = [];
    let calls = 0;
    for (let i = 0; i < 5; i++) {
      const before = t.upstream.requests.length;
      const result = await client.images.generate({ model: "image-2", prompt: `n${i}` }).then(
        () => 200,
        (e: InstanceType<typeof OpenAI.APIError>) => {
          if (e.status === 429) expect(Number(e.headers?.get("retry-after"))).toBeGreaterThan(0);
          return e.status ?? 0;
        },
      );
      outcomes.push(result);
      calls += t.upstream.requests.length - before;
    }
    // 4 per minute, and the edit above took one.
    expect(outcomes).toEqual([200, 200, 200, 429, 429]);
    expect(calls).toBe(3);
    expect((await t.usage()).filter((row) => row.model === "image-2")).toHaveLength(3);
    t.expectSoundLedger();
  });
});
