/**
 * `make audit` (scripts/audit-deps.mjs): a finding of `npm audit --omit=dev` fails the build
 * unless audit-allowlist.json names it with a reason. Run here against an `npm` on PATH that
 * prints a report in npm's own format (auditReportVersion 2), so the script's whole path runs.
 */
import { execFile } from "node:child_process";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { judge } from "../../scripts/audit-deps.mjs";

const advisory = {
  source: 1099846,
  name: "cookie",
  dependency: "cookie",
  title: "cookie accepts cookie name, path, and domain with out of bounds characters",
  url: "https://github.com/advisories/GHSA-pxg6-pf52-xh8x",
  severity: "low",
  range: "<0.7.0",
};
/** A report as npm 10 prints it: the advisory on `cookie`, and `express` affected through it. */
const report = {
  auditReportVersion: 2,
  vulnerabilities: {
    cookie: { name: "cookie", severity: "low", isDirect: false, via: [advisory], effects: ["express"] },
    express: { name: "express", severity: "low", isDirect: true, via: ["cookie"], effects: [] },
  },
  metadata: { vulnerabilities: { low: 2, total: 2 } },
};
const unreachable = {
  message: "405 Method Not Allowed - POST https://registry.npmjs.org/-/npm/v1/security/advisories/bulk",
  error: { summary: "" },
};

describe("the dependency audit", () => {
  let bin: string;
  beforeAll(async () => {
    bin = await mkdtemp(join(tmpdir(), "tollgate-audit-"));
  });
  afterAll(async () => {
    await rm(bin, { recursive: true, force: true });
  });

  /** Runs scripts/audit-deps.mjs with an `npm` that prints `output` and exits 1, as npm audit does. */
  async function audit(output: unknown, env: Record<string, string> = {}) {
    await writeFile(join(bin, "report.json"), JSON.stringify(output));
    await writeFile(join(bin, "npm"), `#!/bin/sh\ncat "${join(bin, "report.json")}"\nexit 1\n`);
    await chmod(join(bin, "npm"), 0o755);
    return new Promise<{ code: number; out: string }>((resolve) => {
      execFile(
        process.execPath,
        ["scripts/audit-deps.mjs"],
        { env: { ...process.env, ...env, PATH: `${bin}:${process.env.PATH}` } },
        (error, stdout, stderr) =>
          resolve({ code: error === null ? 0 : Number(error.code), out: stdout + stderr }),
      );
    });
  }

  it("fails on a finding the allow-list does not name, naming the advisory and the package", async () => {
    const { code, out } = await audit(report);
    expect(code).toBe(1);
    expect(out).toContain("low GHSA-pxg6-pf52-xh8x in cookie");
    expect(out).toContain("1 finding(s) not in audit-allowlist.json");
  });

  it("passes a finding the allow-list names with a reason, and reports an entry that matches nothing", () => {
    const allow = [
      { advisory: "GHSA-pxg6-pf52-xh8x", package: "cookie", reason: "we never set cookie names" },
    ];
    const listed = judge(report, allow);
    expect(listed.failing).toEqual([]);
    expect(listed.allowed.map((a) => a.advisory)).toEqual(["GHSA-pxg6-pf52-xh8x"]);
    expect(judge({ vulnerabilities: {} }, allow).stale).toEqual(allow);
    expect(() => judge(report, [{ ...allow[0]!, reason: " " }])).toThrow(/needs a reason/);
  });

  it("says nothing was audited when the advisory database does not answer, and fails if told to", async () => {
    const lenient = await audit(unreachable);
    expect(lenient.code).toBe(0);
    expect(lenient.out).toContain("runtime dependencies were NOT audited");
    const strict = await audit(unreachable, { TOLLGATE_AUDIT_REQUIRED: "1" });
    expect(strict.code).toBe(1);
  });

  it("passes a clean report", async () => {
    const { code, out } = await audit({ auditReportVersion: 2, vulnerabilities: {}, metadata: {} });
    expect(code).toBe(0);
    expect(out).toContain("no findings");
  });
});
