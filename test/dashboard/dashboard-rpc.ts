/** A Connect unary call's outcome, as a browser would see it. */
export interface RpcResult {
  readonly status: number;
  // biome-ignore lint/suspicious/noExplicitAny: JSON of many shapes
  readonly body: any;
  readonly setCookie: string | null;
}

/** Options of one call: the session cookie and the CSRF header, as the page sends them. */
export interface RpcOptions {
  readonly cookie?: string;
  readonly csrf?: string;
}

/** Calls a dashboard RPC over the facade's HTTP/1.1 bridge with the Connect protocol (JSON). */
export async function dashboardRpc(
  baseUrl: string,
  method: `${"AuthService" | "BillingService"}/${string}`,
  body: unknown,
  { cookie, csrf }: RpcOptions = {},
): Promise<RpcResult> {
  const service = method.startsWith("Auth") ? "tollgate.auth.v1." : "tollgate.billing.v1.";
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (cookie !== undefined) headers.cookie = cookie;
  if (csrf !== undefined) headers["x-csrf-token"] = csrf;
  const res = await fetch(`${baseUrl}/dashboard/rpc/${service}${method}`, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
  });
  return { status: res.status, body: await res.json(), setCookie: res.headers.get("set-cookie") };
}

/** The `name=value` part of a Set-Cookie header, to send back as Cookie. */
export function cookieOf(setCookie: string | null): string {
  if (setCookie === null) throw new Error("no Set-Cookie");
  return setCookie.split(";")[0]!;
}
