/**
 * OAuth access tokens for Vertex AI from a service-account key (docs/providers-platforms.md), by
 * `google-auth-library`'s JWT client: it signs the JWT assertion with the key and trades it at
 * the token endpoint. Tokens are cached and refreshed {@link REFRESH_EARLY_MS} before they
 * expire, and calls that find the token stale while a refresh is under way share that refresh:
 * one token fetch at a time, never one per call.
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

  /** Throws TypeError when `key` is not a service-account key (no email or no private key). */
  constructor(key: object) {
    const account = serviceAccount(key);
    this.#jwt = new JWT({
      email: account.client_email,
      key: account.private_key,
      ...(account.private_key_id === undefined ? {} : { keyId: account.private_key_id }),
      scopes: [CLOUD_PLATFORM],
      eagerRefreshThresholdMillis: REFRESH_EARLY_MS,
    });
    const tokenUri = account.token_uri;
    if (tokenUri !== undefined && tokenUri !== GOOGLE_TOKEN_URL) {
      // The key names its token endpoint (a private or test one): the library's requests to
      // Google's default go there instead.
      this.#jwt.transporter.interceptors.request.add({
        resolved: async (config) => {
          if (String(config.url) === GOOGLE_TOKEN_URL) config.url = new URL(tokenUri);
          return config;
        },
      });
    }
  }

  /**
   * A token valid for at least {@link REFRESH_EARLY_MS} more. Throws UpstreamFailure when the
   * token endpoint cannot be reached, TokenRefused when it refuses the key.
   */
  async token(): Promise<string> {
    const current = this.#current;
    if (current !== undefined && Date.now() < current.expiresAt - REFRESH_EARLY_MS) return current.token;
    this.#refreshing ??= this.#refresh().finally(() => {
      this.#refreshing = undefined;
    });
    return this.#refreshing;
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
      throw new UpstreamFailure("unreachable", `no Google access token: ${String(error)}`, { cause: error });
    }
    const expiresAt = this.#jwt.credentials.expiry_date;
    if (typeof token !== "string" || token === "" || typeof expiresAt !== "number") {
      throw new UpstreamFailure("malformed", "the token endpoint answered without a token and its expiry");
    }
    this.#current = { token, expiresAt };
    return token;
  }
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
