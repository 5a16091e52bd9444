/** Types of scripts/audit-deps.mjs for the tests. */
export interface Advisory {
  readonly advisory: string;
  readonly package: string;
  readonly severity: string;
  readonly title: string;
  readonly url: string;
}
export interface AllowEntry {
  readonly advisory: string;
  readonly package: string;
  readonly reason: string;
}
export function advisoriesOf(report: unknown): Advisory[];
export function judge(
  report: unknown,
  allowlist: readonly AllowEntry[],
): { failing: Advisory[]; allowed: Advisory[]; stale: AllowEntry[] };
