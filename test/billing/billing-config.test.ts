import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/config.js";
import { defaultPriceCatalog } from "../../src/core/billing/default-catalog.js";
import { tempDir } from "../helpers/process.js";
import { chainsJson } from "./fixtures.js";

const dir = tempDir();
afterAll(dir.cleanup);

function file(name: string, content: string): string {
  const path = join(dir.path, name);
  writeFileSync(path, content);
  return path;
}

describe("billing configuration", () => {
  it("ships embedded defaults", () => {
    const config = loadConfig({});
    expect(config.chains.chains.map((c) => c.id)).toEqual(["base", "arbitrum", "robinhood", "solana"]);
    expect(config.catalog).toEqual(defaultPriceCatalog());
    expect(config.maxCallMs).toBe(900_000);
    expect(config.holdSweepIntervalMs).toBe(60_000);
    expect(config.healthIntervalMs).toBe(10_000);
    expect(loadConfig({ TOLLGATE_HEALTH_INTERVAL_S: "2" }).healthIntervalMs).toBe(2_000);
  });

  it("reads the chain registry and catalog files, relative to the working directory", () => {
    const chains = chainsJson();
    chains.chains[0] = { ...chains.chains[0], enabled: false };
    chains.default_chain = "solana";
    file("chains.json", JSON.stringify(chains));
    file("catalog.json", JSON.stringify({ text: {}, images: { "image-x": { "2K": 50_000 } } }));
    const config = loadConfig({ TOLLGATE_CHAINS: "chains.json", TOLLGATE_CATALOG: "catalog.json" }, dir.path);
    expect(config.chains.defaultChain).toBe("solana");
    expect(config.chains.byId.get("base")?.enabled).toBe(false);
    expect([...config.catalog.images.keys()]).toEqual(["image-x"]);
  });

  it.each([
    ["TOLLGATE_CHAINS", "missing.json", /TOLLGATE_CHAINS: cannot read/],
    ["TOLLGATE_CHAINS", file("not-json.json", "{"), /TOLLGATE_CHAINS: .* is not valid JSON/],
    [
      "TOLLGATE_CHAINS",
      file("empty-chains.json", '{"default_chain":"base","chains":[]}'),
      /TOLLGATE_CHAINS: .*at least one chain/,
    ],
    [
      "TOLLGATE_CATALOG",
      file("bad-catalog.json", '{"text":{"m":{"input":1}}}'),
      /TOLLGATE_CATALOG: .*\$\.text\["m"\]\.output/,
    ],
    ["TOLLGATE_MAX_CALL_MS", "soon", /^TOLLGATE_MAX_CALL_MS: /],
    ["TOLLGATE_HOLD_SWEEP_INTERVAL_MS", "0", /^TOLLGATE_HOLD_SWEEP_INTERVAL_MS: /],
  ])("refuses a bad %s, naming it", (name, value, message) => {
    expect(() => loadConfig({ [name]: value }, dir.path)).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value }, dir.path)).toThrow(message);
  });
});
