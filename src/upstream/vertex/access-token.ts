/**
 * OAuth access tokens for Vertex AI from a service-account key (docs/providers.md, "Google Vertex AI"), by
 * `google-auth-library`'s JWT client: it signs the JWT assertion with the key and trades it at
 * the token endpoint. Tokens are cached and refreshed {@link REFRESH_EARLY_MS} before they
 * expire, and calls that find the token stale while a refresh is under way share that refresh:
 * one token fetch at a time, never one per call. A fetch is bounded by the endpoint's own
 * connect + headers timeouts and never retried inside a call (the router fails over instead).
 */
import { JWT } from "google-auth-library";
import { UpstreamFailure } from "../../core/ports/providers.js";

/** The scope Vertex AI's prediction API needs. */
const CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform";
/** Where google-auth-library trades assertions (it does not read a key's `token_uri` itself). */
const GOOGLE_TOKEN_URL = "https://oauth2.googleapis.com/token";
/** How long before its expiry a token is replaced: google-auth-library's own default. */
export const REFRESH_EARLY_MS = 5 * 60_000;

/** The fields of a service-account key file this client reads. */
interface ServiceAccountKey {
  readonly client_email: string;
  readonly private_key: string;
  readonly private_key_id?: string;
  readonly token_uri?: string;
}

/** A token endpoint's refusal of the key (the gateway's credentials, not the caller's fault). */
export class TokenRefused extends Error {
  constructor(
    readonly status: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "TokenRefused";
  }
}

/** The access tokens of one service account. */
export class AccessTokens {
  readonly #jwt: JWT;
  #current: { readonly token: string; readonly expiresAt: number } | undefined;
  #refreshing: Promise<string> | undefined;

  /**
   * `timeoutMs` bounds one token fetch. Throws TypeError when `key` is not a service-account key
   * (no email or no private key).
   */
  constructor(key: object, timeoutMs: number) {
    const account = serviceAccount(key);
    this.#jwt = new JWT({
      email: account.client_email,
      key: account.private_key,
      ...(account.private_key_id === undefined ? {} : { keyId: account.private_key_id }),
      scopes: [CLOUD_PLATFORM],
      eagerRefreshThresholdMillis: REFRESH_EARLY_MS,
    });
    const tokenUri = account.token_uri;
    const redirect = tokenUri !== undefined && tokenUri !== GOOGLE_TOKEN_URL ? new URL(tokenUri) : undefined;
    this.#jwt.transporter.interceptors.request.add({
      resolved: async (config) => {
        // The key names its token endpoint (a private or test one): the library's requests to
        // Google's default go there instead.
        if (redirect !== undefined && String(config.url) === GOOGLE_TOKEN_URL) config.url = redirect;
        // Interceptors run after gaxios has read `timeout`, so the deadline is a signal here; and
        // the library asks gaxios to retry token requests, which would stack timeouts in a call.
        const deadline = AbortSignal.timeout(timeoutMs);
        config.signal = config.signal ? AbortSignal.any([config.signal, deadline]) : deadline;
        config.retryConfig = { ...config.retryConfig, retry: 0, noResponseRetries: 0 };
        return config;
      },
    });
  }

  /**
   * A token valid for at least {@link REFRESH_EARLY_MS} more. Throws UpstreamFailure when the
   * token endpoint cannot be reached, TokenRefused when it refuses the key.
   */
  async token(signal?: AbortSignal): Promise<string> {
    const current = this.#current;
    if (current !== undefined && Date.now() < current.expiresAt - REFRESH_EARLY_MS) return current.token;
    this.#refreshing ??= this.#refresh().finally(() => {
      this.#refreshing = undefined;
    });
    if (signal === undefined) return this.#refreshing;
    // The caller may leave; the shared refresh carries on for the others.
    return Promise.race([this.#refreshing, aborted(signal)]);
  }

  async #refresh(): Promise<string> {
    let token: string | null | undefined;
    try {
      token = (await this.#jwt.getAccessToken()).token;
    } catch (error) {
      const status = (error as { response?: { status?: unknown } }).response?.status;
      if (typeof status === "number" && status >= 400 && status < 500) {
        throw new TokenRefused(status, `the token endpoint refused the service account: ${String(error)}`, {
          cause: error,
        });
      }
      const kind = isTimeout(error) ? "timeout" : "unreachable";
      throw new UpstreamFailure(kind, `no Google access token: ${String(error)}`, { cause: error });
    }
    const expiresAt = this.#jwt.credentials.expiry_date;
    if (typeof token !== "string" || token === "" || typeof expiresAt !== "number") {
      throw new UpstreamFailure("malformed", "the token endpoint answered without a token and its expiry");
    }
    this.#current = { token, expiresAt };
    return token;
  }
}

/** Rejects with UpstreamFailure "aborted" once `signal` aborts. */
function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_resolve, reject) => {
    const fail = () =>
      reject(new UpstreamFailure("aborted", "call aborted while waiting for a Google access token"));
    if (signal.aborted) fail();
    else signal.addEventListener("abort", fail, { once: true });
  });
}

/** Whether the token request was cut by its deadline (gaxios reports "aborted"; the signal says why). */
function isTimeout(error: unknown): boolean {
  const reason = (error as { config?: { signal?: AbortSignal | null } }).config?.signal?.reason as unknown;
  return reason instanceof Error && reason.name === "TimeoutError";
}

function serviceAccount(key: object): ServiceAccountKey {
  const fields = key as Partial<Record<keyof ServiceAccountKey, unknown>>;
  if (typeof fields.client_email !== "string" || typeof fields.private_key !== "string") {
    throw new TypeError("the service-account key has no client_email or private_key");
  }
  return {
    client_email: fields.client_email,
    private_key: fields.private_key,
    ...(typeof fields.private_key_id === "string" ? { private_key_id: fields.private_key_id } : {}),
    ...(typeof fields.token_uri === "string" ? { token_uri: fields.token_uri } : {}),
  };
}
