/**
 * Bedrock's request authentication (docs/providers.md, "Amazon Bedrock"): AWS Signature Version 4 for
 * service `bedrock` by `@smithy/signature-v4` (the signer Anthropic's Bedrock SDK and the AWS
 * SDK use), its SHA-256 and HMAC from node:crypto through `@smithy/core`'s `Hash` (as the AWS SDK
 * for Node does: a pure-JS SHA-256 costs milliseconds per large body on the serving thread), or a
 * Bedrock API key sent as a bearer token.
 */
import { Hash } from "@smithy/core/serde";
import { SignatureV4 } from "@smithy/signature-v4";

/** How an endpoint proves itself to Bedrock. */
export type BedrockAuth =
  | {
      readonly kind: "sigv4";
      readonly accessKeyId: string;
      readonly secretAccessKey: string;
      readonly sessionToken?: string;
    }
  | { readonly kind: "bearer"; readonly token: string };

/** SHA-256 (keyed: HMAC) on node:crypto, in the shape the signer takes. */
export const SHA256 = Hash.bind(null, "sha256");

/** The SigV4 service name of Bedrock's runtime API. */
export const BEDROCK_SIGNING_SERVICE = "bedrock";

/** Adds the authentication headers to one request's headers. */
export class BedrockSigner {
  readonly #auth: BedrockAuth;
  readonly #signer: SignatureV4 | undefined;

  constructor(auth: BedrockAuth, region: string) {
    this.#auth = auth;
    this.#signer =
      auth.kind === "sigv4"
        ? new SignatureV4({
            service: BEDROCK_SIGNING_SERVICE,
            region,
            sha256: SHA256,
            credentials: {
              accessKeyId: auth.accessKeyId,
              secretAccessKey: auth.secretAccessKey,
              ...(auth.sessionToken === undefined ? {} : { sessionToken: auth.sessionToken }),
            },
          })
        : undefined;
  }

  /**
   * The headers to send: `headers` plus the authentication. `url` is the request's full URL;
   * its `host` (port included when not the default) is signed as the HTTP client sends it.
   */
  async headers(url: URL, headers: Record<string, string>, body: string): Promise<Record<string, string>> {
    if (this.#auth.kind === "bearer") return { ...headers, authorization: `Bearer ${this.#auth.token}` };
    const signed = await this.#signer!.sign({
      method: "POST",
      protocol: url.protocol,
      hostname: url.hostname,
      ...(url.port === "" ? {} : { port: Number(url.port) }),
      path: url.pathname,
      query: {},
      headers: { ...headers, host: url.host },
      body,
    });
    return signed.headers;
  }
}
