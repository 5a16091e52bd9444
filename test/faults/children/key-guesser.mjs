// A key guesser as a process of its own, so its work does not share the test's event loop with
// the valid caller being timed. Reads one JSON job from stdin — { url, localAddress, concurrency,
// keys } — posts one small /v1/messages request per key from `localAddress`, `concurrency` at a
// time, and prints the answers as JSON, in the order they arrived.
import { text } from "node:stream/consumers";
import { Agent, fetch } from "undici";

const job = JSON.parse(await text(process.stdin));
const agent = new Agent({ localAddress: job.localAddress });
const body = JSON.stringify({
  model: "model-haiku-4-5",
  max_tokens: 16,
  messages: [{ role: "user", content: "hi" }],
});
const answers = [];
let next = 0;

async function worker() {
  while (next < job.keys.length) {
    const key = job.keys[next++];
    const response = await fetch(`${job.url}/v1/messages`, {
      method: "POST",
      dispatcher: agent,
      headers: { "content-type": "application/json", "x-api-key": key },
      body,
    });
    answers.push({
      status: response.status,
      body: await response.json(),
      requestId: response.headers.get("x-request-id"),
      retryAfter: response.headers.get("retry-after"),
    });
  }
}

await Promise.all(Array.from({ length: job.concurrency }, worker));
await agent.close();
process.stdout.write(JSON.stringify(answers));
