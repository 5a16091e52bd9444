import { type ClientRequest, type IncomingMessage, request } from "node:http";

/** One event as a client read it off the wire. */
export interface ReadEvent {
  readonly event: string;
  readonly data: string;
}

/** A streaming POST read event by event, which the test can cut off at any point. */
export interface OpenStream {
  readonly status: number;
  readonly headers: IncomingMessage["headers"];
  /** The next event, or undefined at the end of the stream. */
  next(): Promise<ReadEvent | undefined>;
  /** Every remaining event. */
  rest(): Promise<ReadEvent[]>;
  /** Drops the connection, as a client that goes away does. */
  cut(): void;
  /** The whole body when the answer was not a stream (an error). */
  text(): Promise<string>;
}

/** POSTs `body` as JSON and returns once the response headers arrived. */
export function openStream(url: string, body: unknown, headers: Record<string, string>): Promise<OpenStream> {
  return new Promise((resolve, reject) => {
    const req: ClientRequest = request(
      url,
      { method: "POST", headers: { "content-type": "application/json", ...headers } },
      (res) => {
        res.setEncoding("utf8");
        let buffer = "";
        let ended = false;
        let waiting: (() => void) | undefined;
        res.on("data", (chunk: string) => {
          buffer += chunk;
          waiting?.();
        });
        const finish = () => {
          ended = true;
          waiting?.();
        };
        res.on("end", finish);
        res.on("close", finish);
        res.on("error", finish);
        const next = async (): Promise<ReadEvent | undefined> => {
          for (;;) {
            const end = buffer.indexOf("\n\n");
            if (end >= 0) {
              const frame = buffer.slice(0, end);
              buffer = buffer.slice(end + 2);
              if (frame.startsWith(":")) continue;
              let event = "message";
              const data: string[] = [];
              for (const line of frame.split("\n")) {
                if (line.startsWith("event: ")) event = line.slice(7);
                else if (line.startsWith("data: ")) data.push(line.slice(6));
              }
              return { event, data: data.join("\n") };
            }
            if (ended) return undefined;
            await new Promise<void>((r) => {
              waiting = r;
            });
            waiting = undefined;
          }
        };
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          next,
          async rest() {
            const events: ReadEvent[] = [];
            for (let e = await next(); e !== undefined; e = await next()) events.push(e);
            return events;
          },
          cut() {
            req.destroy();
          },
          async text() {
            while (!ended) {
              await new Promise<void>((r) => {
                waiting = r;
              });
              waiting = undefined;
            }
            return buffer;
          },
        });
      },
    );
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}
