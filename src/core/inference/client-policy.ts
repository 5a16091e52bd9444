/** The client policies, as TOLLGATE_CLIENT_POLICY names them. */
export const CLIENT_POLICIES = ["any", "coding-agent-only"] as const;

/** Which clients may make text calls: everyone, or only the Claude Code CLI. */
export type ClientPolicy = (typeof CLIENT_POLICIES)[number];

/** The Claude Code CLI's user agent: `claude-cli/<version> (external, cli|sdk-cli)`. */
const CODING_AGENT = /^claude-cli\//;

/** Whether a text call from a client with this `User-Agent` is admitted under `policy`. */
export function clientAllowed(policy: ClientPolicy, userAgent: string): boolean {
  return policy === "any" || CODING_AGENT.test(userAgent);
}
