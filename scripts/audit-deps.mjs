#!/usr/bin/env node
/**
 * `make audit`: `npm audit --omit=dev` over the runtime dependencies. A finding fails the run
 * unless audit-allowlist.json names its advisory with a reason. The advisory database is reached
 * through the npm registry; where the registry does not serve it (a mirror that answers only GET,
 * as on the project's build machines), the run says loudly that nothing was audited and passes,
 * unless TOLLGATE_AUDIT_REQUIRED=1 makes that a failure too.
 */
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

/**
 * The advisories of an `npm audit --json` report (auditReportVersion 2), one per advisory and
 * package: `via` entries that are objects are advisories; strings only point at another package.
 * @param {any} report
 * @returns {{ advisory: string, package: string, severity: string, title: string, url: string }[]}
 */
export function advisoriesOf(report) {
  const found = new Map();
  for (const vulnerability of Object.values(report.vulnerabilities ?? {})) {
    for (const via of vulnerability.via ?? []) {
      if (typeof via !== "object" || via === null) continue;
      const url = String(via.url ?? "");
      const advisory = url.split("/").pop() || String(via.source);
      found.set(`${advisory} ${via.name}`, {
        advisory,
        package: String(via.name),
        severity: String(via.severity),
        title: String(via.title ?? ""),
        url,
      });
    }
  }
  return [...found.values()];
}

/**
 * Splits the report's advisories by the allow-list: those not named fail the audit; entries that
 * match nothing any more are stale and should be removed.
 * @param {any} report
 * @param {{ advisory: string, package: string, reason: string }[]} allowlist
 */
export function judge(report, allowlist) {
  for (const entry of allowlist) {
    if (typeof entry.reason !== "string" || entry.reason.trim() === "") {
      throw new Error(`audit-allowlist.json: ${entry.advisory} (${entry.package}) needs a reason`);
    }
  }
  const allowed = (finding) =>
    allowlist.some((entry) => entry.advisory === finding.advisory && entry.package === finding.package);
  const findings = advisoriesOf(report);
  return {
    failing: findings.filter((finding) => !allowed(finding)),
    allowed: findings.filter(allowed),
    stale: allowlist.filter(
      (entry) => !findings.some((f) => f.advisory === entry.advisory && f.package === entry.package),
    ),
  };
}

function npmAudit(cwd) {
  return new Promise((resolve) => {
    // npm audit exits non-zero when it finds something; the JSON says what either way.
    execFile(
      "npm",
      ["audit", "--omit=dev", "--json"],
      { cwd, maxBuffer: 64 * 1024 * 1024 },
      (_error, stdout, stderr) => resolve({ stdout, stderr }),
    );
  });
}

async function main() {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const allowlist = JSON.parse(await readFile(new URL("../audit-allowlist.json", import.meta.url), "utf8"));
  const { stdout, stderr } = await npmAudit(root);
  let report;
  try {
    report = JSON.parse(stdout);
  } catch {
    report = { error: { summary: stderr.trim().split("\n").pop() ?? "no output" } };
  }
  if (report.error !== undefined || report.vulnerabilities === undefined) {
    const why = report.message ?? report.error?.summary ?? "no report";
    const line = `audit: the npm advisory database did not answer (${why}): runtime dependencies were NOT audited`;
    if (process.env.TOLLGATE_AUDIT_REQUIRED === "1") {
      console.error(line);
      process.exit(1);
    }
    console.warn(`${line}; set TOLLGATE_AUDIT_REQUIRED=1 to make this fail`);
    return;
  }
  const { failing, allowed, stale } = judge(report, allowlist);
  for (const f of allowed) console.log(`audit: allowed ${f.advisory} in ${f.package} (${f.severity})`);
  for (const s of stale)
    console.warn(
      `audit: audit-allowlist.json names ${s.advisory} (${s.package}), no longer found: remove it`,
    );
  if (failing.length > 0) {
    for (const f of failing)
      console.error(`audit: ${f.severity} ${f.advisory} in ${f.package}: ${f.title} ${f.url}`);
    console.error(`audit: ${failing.length} finding(s) not in audit-allowlist.json`);
    process.exit(1);
  }
  console.log(
    `audit: ${allowed.length === 0 ? "no findings" : `${allowed.length} allowed finding(s), none other`} in the runtime dependencies`,
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
