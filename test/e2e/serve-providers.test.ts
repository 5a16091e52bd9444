/**
 * `serve` with a providers file, as the compiled CLI (dist/): it fails closed on a credential the
 * file names that is unset, and stops on a bad file with a message naming the field.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli, tempDir } from "../helpers/process.js";

const dir = tempDir();
afterAll(() => dir.cleanup());

function providersFile(name: string, content: unknown): string {
  const path = join(dir.path, name);
  writeFileSync(path, JSON.stringify(content));
  return path;
}

describe("tollgate serve with TOLLGATE_PROVIDERS", () => {
  it("refuses to start while a credential the file names is unset, naming it and the field", async () => {
    const file = providersFile("providers.json", {
      endpoints: [
        { name: "anthropic-1", kind: "anthropic", apiKey: { env: "TEST_PROVIDER_KEY_1" } },
        { name: "anthropic-2", kind: "anthropic", apiKey: { env: "TEST_PROVIDER_KEY_2" } },
      ],
      text: { "model-haiku-4-5": ["anthropic-1", "anthropic-2"] },
    });
    const result = await runCli(["serve"], {
      TOLLGATE_DATA_DIR: dir.path,
      TOLLGATE_PROVIDERS: file,
      TEST_PROVIDER_KEY_1: "sk-set",
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("serve refuses to start without");
    expect(result.stderr).toContain(
      "TEST_PROVIDER_KEY_2 (providers.json: endpoints[1].apiKey names it; it is unset)",
    );
    expect(result.stderr).not.toContain("TEST_PROVIDER_KEY_1 (");
    // The file routes text: no Anthropic variable is asked for.
    expect(result.stderr).not.toContain("TOLLGATE_ANTHROPIC_API_KEY");
    expect(result.stdout).not.toContain("ready");
  });

  it("stops on a file that writes a secret inline, naming the field and never echoing the secret", async () => {
    const file = providersFile("inline.json", {
      endpoints: [{ name: "anthropic-1", kind: "anthropic", apiKey: "sk-ant-api03-not-a-real-key" }],
      text: { "model-haiku-4-5": ["anthropic-1"] },
    });
    const result = await runCli(["serve"], { TOLLGATE_DATA_DIR: dir.path, TOLLGATE_PROVIDERS: file });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(
      "TOLLGATE_PROVIDERS: inline.json: endpoints[0].apiKey: must name where the secret is",
    );
    expect(result.stderr).not.toContain("sk-ant-api03-not-a-real-key");
  });
});
