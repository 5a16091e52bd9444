/**
 * The credential a request presents: `x-api-key`, else the token of `Authorization: Bearer`.
 * Pure, shared by the facade (HTTP headers) and the core (RPC metadata).
 */
export function presentedCredential(get: (name: string) => string | null | undefined): string | undefined {
  const apiKey = get("x-api-key")?.trim();
  if (apiKey) return apiKey;
  const authorization = get("authorization")?.trim();
  if (!authorization) return undefined;
  const match = /^bearer\s+(.+)$/i.exec(authorization);
  // An Authorization header that is not Bearer is presented but unusable: treated as malformed.
  return match ? match[1]!.trim() : authorization;
}
