import type { PageContext } from "../context.js";
import { copyButton, h, mount } from "../dom.js";

/** How to point Claude Code, curl and the SDKs at this gateway, with its base URL filled in. */
export async function startPage(ctx: PageContext): Promise<void> {
  const origin = location.origin;
  const key = ctx.session === undefined ? "tg_… (create one on the Keys page)" : "tg_…your key…";
  const snippet = (id: string, title: string, text: string) =>
    h("section", { class: "panel", id }, h("h2", {}, title), h("pre", {}, text), copyButton(text));
  mount(
    ctx.main,
    h("h1", {}, "Getting started"),
    h(
      "p",
      {},
      "1. Sign in with a wallet. 2. Fund it on the Wallet page. 3. Create a key on the Keys page. " +
        "4. Point your client at ",
      h("code", { id: "base-url" }, origin),
      ".",
    ),
    snippet(
      "claude-code",
      "Claude Code",
      `export ANTHROPIC_BASE_URL=${origin}\nexport ANTHROPIC_AUTH_TOKEN=${key}\nclaude`,
    ),
    h(
      "p",
      { class: "muted" },
      "ANTHROPIC_BASE_URL is the origin without /v1: Claude Code adds /v1/messages itself.",
    ),
    snippet(
      "curl-text",
      "curl: a message",
      `curl ${origin}/v1/messages \\\n  -H "x-api-key: ${key}" \\\n  -H "anthropic-version: 2023-06-01" \\\n  -H "content-type: application/json" \\\n  -d '{"model": "model-sonnet-5", "max_tokens": 256, "messages": [{"role": "user", "content": "Hello"}]}'`,
    ),
    snippet(
      "curl-image",
      "curl: an image",
      `curl ${origin}/v1/images/generations \\\n  -H "authorization: Bearer ${key}" \\\n  -H "content-type: application/json" \\\n  -d '{"model": "image-2", "prompt": "a lighthouse at dusk", "size": "1K", "aspect_ratio": "16:9"}'`,
    ),
    snippet(
      "sdk-anthropic",
      "TypeScript: @anthropic-ai/sdk",
      `import Anthropic from "@anthropic-ai/sdk";\n\nconst client = new Anthropic({ baseURL: "${origin}", apiKey: "${key}" });\nconst message = await client.messages.create({\n  model: "model-sonnet-5",\n  max_tokens: 256,\n  messages: [{ role: "user", content: "Hello" }],\n});`,
    ),
    snippet(
      "sdk-openai",
      "TypeScript: openai (images)",
      `import OpenAI from "openai";\n\nconst client = new OpenAI({ baseURL: "${origin}/v1", apiKey: "${key}" });\nconst image = await client.images.generate({ model: "image-2", prompt: "a lighthouse at dusk" });`,
    ),
    h(
      "p",
      { class: "muted" },
      "Calls bill your default chain; send x-gateway-billing-chain: <chain> to pick another per call.",
    ),
    h("h2", {}, "No account, no key: pay per call with x402"),
    h(
      "p",
      {},
      `x402's door is ${origin}/x402: the same routes (/x402/v1/messages, /x402/v1/images/generations, ` +
        "/x402/v1/images/edits) paid per call with no key (a key sent there is ignored). A call there without a payment is " +
        "answered 402 with a PAYMENT-REQUIRED offer on each chain: x402's " +
        "own client signs a stablecoin authorisation and retries. Text is paid with upto (the worst " +
        "case is authorised, only the delivered price is collected; EVM chains), images with exact " +
        "(EVM chains and Solana, with @x402/svm). Streams are " +
        "relayed as they arrive; their receipt, with the collecting transaction, is at " +
        "/x402/v1/receipts/<request-id>, for the paying wallet signed in with x402's sign-in-with-x " +
        "(wrapFetchWithSIWx from @x402/extensions).",
    ),
    snippet(
      "x402-fetch",
      "TypeScript: @x402/fetch",
      `import { x402Client } from "@x402/core/client";
import { toClientEvmSigner } from "@x402/evm";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { UptoEvmScheme } from "@x402/evm/upto/client";
import { wrapFetchWithPayment } from "@x402/fetch";
import { createPublicClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";

const rpcUrl = "https://mainnet.base.org";
const signer = toClientEvmSigner(privateKeyToAccount(process.env.PRIVATE_KEY), createPublicClient({ transport: http(rpcUrl) }));
const client = new x402Client()
  .register("eip155:8453", new ExactEvmScheme(signer))
  .register("eip155:8453", new UptoEvmScheme(signer, { rpcUrl }));
const paidFetch = wrapFetchWithPayment(fetch, client);

const response = await paidFetch("${origin}/x402/v1/messages", {
  method: "POST",
  headers: { "content-type": "application/json", "x-gateway-billing-chain": "base" },
  body: JSON.stringify({ model: "model-sonnet-5", max_tokens: 256, messages: [{ role: "user", content: "Hello" }] }),
});
console.log(response.headers.get("payment-response"), await response.json());`,
    ),
  );
}
