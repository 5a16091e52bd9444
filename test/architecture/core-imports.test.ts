import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const SRC = resolve(import.meta.dirname, "../../src");

/*
 * What the core may import (DESIGN.md §5): itself, the generated code, and the few packages and
 * built-ins below. Not the adapters that implement its ports (store/, upstream/, chains/,
 * limits/), the stand-ins (dev/), the facade, the server (serving/), nor the configuration (the
 * composition root reads it and passes values in), nor a chain SDK (the dashboard's wallet
 * sign-in reaches viem and @solana/web3.js through the WalletSignatures port). Tests beside the source (*.test.ts) may
 * import vitest and are not checked.
 */

/** Every module specifier of a source text: static imports and re-exports, side-effect and dynamic imports. */
function specifiers(source: string): string[] {
  const found: string[] = [];
  const patterns = [
    /\b(?:import|export)\s[^;]*?\sfrom\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
    /\bimport\s*["']([^"']+)["']/g,
  ];
  for (const pattern of patterns) for (const match of source.matchAll(pattern)) found.push(match[1]!);
  return found;
}

/**
 * The bare (package) imports the core may name, each with why. Everything else — a payment SDK,
 * an HTTP server, a database driver, a provider's client — is an adapter's (docs/architecture.md).
 */
const ALLOWED_PACKAGES: ReadonlyMap<string, string> = new Map([
  ["@bufbuild/protobuf", "the generated messages' runtime: create, toBinary, fromBinary"],
  ["@bufbuild/protobuf/wkt", "the well-known types (Timestamp) the generated messages use"],
  // The root only: its sub-paths (connect/protocol, connect-node, connect-fastify) are transports.
  [
    "@connectrpc/connect",
    "the services' contract: ServiceImpl, Code, ConnectError, interceptors, context keys",
  ],
]);

/** The node: built-ins the core may name, each with why: no I/O of its own (no fs, net servers, http). */
const ALLOWED_BUILTINS: ReadonlyMap<string, string> = new Map([
  ["node:crypto", "hashes, HMACs, random ids and nonces, the receipts' and sign-in's signatures"],
  ["node:zlib", "crc32 only: an API key's checksum (auth/keys.ts)"],
  ["node:net", "isIP/isIPv4 only: reading a client's address (auth/client-address.ts)"],
]);

/**
 * The imports of one file at `file` (a path under src/) the core may not make, as
 * "specifier → why": a relative import leaving src/core and src/gen, or a bare one not allowed.
 */
function forbiddenImports(file: string, source: string): string[] {
  const offending: string[] = [];
  for (const specifier of specifiers(source)) {
    if (specifier.startsWith(".")) {
      const target = relative(SRC, resolve(dirname(join(SRC, file)), specifier)).replace(/\.js$/, ".ts");
      if (!target.startsWith("core/") && !target.startsWith("gen/"))
        offending.push(`${specifier} → src/${target}`);
    } else if (specifier.startsWith("node:")) {
      if (!ALLOWED_BUILTINS.has(specifier)) offending.push(`${specifier} → a built-in not on the list`);
    } else if (!ALLOWED_PACKAGES.has(specifier)) {
      offending.push(`${specifier} → a package the core may not import`);
    }
  }
  return offending;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(SRC, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith(".ts") ? [path] : [];
  });
}

describe("the core's dependencies", () => {
  it("no file in src/core imports outside src/core and src/gen, nor a package or built-in not allowed", () => {
    const files = sourceFiles("core").filter((file) => !file.endsWith(".test.ts"));
    expect(files.length).toBeGreaterThan(40);
    const violations = files.flatMap((file) =>
      forbiddenImports(file, readFileSync(join(SRC, file), "utf8")).map((v) => `src/${file}: ${v}`),
    );
    expect(violations).toEqual([]);
  });

  it("every allowed package and built-in is still used (the lists only shrink)", () => {
    const used = new Set(
      sourceFiles("core")
        .filter((file) => !file.endsWith(".test.ts"))
        .flatMap((file) => specifiers(readFileSync(join(SRC, file), "utf8"))),
    );
    const unused = [...ALLOWED_PACKAGES.keys(), ...ALLOWED_BUILTINS.keys()].filter((s) => !used.has(s));
    expect(unused).toEqual([]);
  });

  it("the check catches each kind of forbidden import", () => {
    const source = [
      'import { AuthRepository } from "../../store/auth-repository.js";',
      'import type { Config } from "../../config.js";',
      'import { parseHeader } from "../header.js";',
      'export { ChainsRuntime } from "../../chains/chains-runtime.js";',
      'const m = await import("../../upstream/anthropic/client.js");',
      "import {\n  memoryRateLimiter,\n} from '../../limits/memory.js';",
      'import { buildCoreServer } from "../../serving/server.js";',
      'import { money } from "./money.js";',
      'import { UserSchema } from "../../gen/tollgate/auth/v1/auth_pb.js";',
      'import { create } from "@bufbuild/protobuf";',
      'import { Code } from "@connectrpc/connect";',
      'import { createHash } from "node:crypto";',
      'import x from "left-pad";',
      'import "reflect-metadata";',
      'import { x402ResourceServer } from "@x402/core/server";',
      'import type { SettleResponse } from "@x402/core/types";',
      'import Fastify from "fastify";',
      'import { invokeUnaryImplementation } from "@connectrpc/connect/protocol";',
      'import { readFileSync } from "node:fs";',
      'import type { Http2Server } from "node:http2";',
    ].join("\n");
    expect(forbiddenImports("core/billing/example.ts", source)).toEqual([
      "../../store/auth-repository.js → src/store/auth-repository.ts",
      "../../config.js → src/config.ts",
      "../../chains/chains-runtime.js → src/chains/chains-runtime.ts",
      "../../limits/memory.js → src/limits/memory.ts",
      "../../serving/server.js → src/serving/server.ts",
      "left-pad → a package the core may not import",
      "@x402/core/server → a package the core may not import",
      "@x402/core/types → a package the core may not import",
      "fastify → a package the core may not import",
      "@connectrpc/connect/protocol → a package the core may not import",
      "node:fs → a built-in not on the list",
      "node:http2 → a built-in not on the list",
      "../../upstream/anthropic/client.js → src/upstream/anthropic/client.ts",
      "reflect-metadata → a package the core may not import",
    ]);
  });

  it("an unknown bare import alone fails the check", () => {
    expect(forbiddenImports("core/ids.ts", 'import x from "left-pad";')).toEqual([
      "left-pad → a package the core may not import",
    ]);
  });
});
