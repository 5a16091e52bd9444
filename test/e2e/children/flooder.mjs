// A flood from one client address, as a process of its own so that its work does not share the
// test's event loop with the keyed caller being timed. Reads one JSON job from stdin —
// { url, localAddress, concurrency, count, headers, body } — POSTs `body` to `url` `count` times
// from `localAddress`, `concurrency` at a time, and prints the answers as JSON, in the order
// they arrived.
import { text } from "node:stream/consumers";
import { Agent, fetch } from "undici";

const job = JSON.parse(await text(process.stdin));
const agent = new Agent({ localAddress: job.localAddress, connections: job.concurrency });
const answers = [];
let sent = 0;

async function worker() {
  while (sent < job.count) {
    sent++;
    const response = await fetch(job.url, {
      method: "POST",
      dispatcher: agent,
      headers: job.headers,
      body: job.body,
    });
    const raw = await response.text();
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      body = raw;
    }
    answers.push({
      status: response.status,
      body,
      requestId: response.headers.get("x-request-id"),
      retryAfter: response.headers.get("retry-after"),
    });
  }
}

await Promise.all(Array.from({ length: job.concurrency }, worker));
await agent.close();
process.stdout.write(JSON.stringify(answers));
