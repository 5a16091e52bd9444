import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  type CreateMessageResponse,
  CreateMessageResponseSchema,
} from "../../gen/tollgate/inference/v1/inference_pb.js";
import { IDEMPOTENCY_ANSWER_LIMIT, type IdempotentClaim } from "./idempotency.js";

/** Ends the replay of a stream whose first client went away before its end. */
const CUT_SHORT = JSON.stringify({
  type: "error",
  error: {
    type: "api_error",
    message:
      "The call with this Idempotency-Key was cut short by its client; this replays what it delivered, which is what was billed. Use a new key to run it again.",
  },
});

/**
 * Relays a message call's parts and keeps them for retries under `claim`: each part once the
 * consumer took it (what the client received), without the keep-alives (`ping`s, comments).
 * A call that ends before its head charged nothing and frees the key.
 */
export async function* recordedMessage(
  parts: AsyncIterable<CreateMessageResponse>,
  claim: IdempotentClaim,
): AsyncGenerator<CreateMessageResponse> {
  const kept: Uint8Array[] = [];
  let size = 0;
  let answered = false;
  try {
    for await (const part of parts) {
      yield part;
      if (part.part.case === "head") answered = true;
      if (!keptPart(part) || size > IDEMPOTENCY_ANSWER_LIMIT) continue;
      const bytes = toBinary(CreateMessageResponseSchema, part);
      size += 4 + bytes.byteLength;
      kept.push(bytes);
    }
  } finally {
    if (!answered) await claim.release();
    else await claim.complete(size > IDEMPOTENCY_ANSWER_LIMIT ? undefined : frames(kept, size));
  }
}

/**
 * A kept answer as a retry gets it: the first call's head (marked replayed) and parts. A stream
 * its client cut short ends with an `error` event saying so. It ends with a charge of 0: the
 * retry is not billed (the first call's own charge is not replayed).
 */
export function replayedMessage(answer: Uint8Array): CreateMessageResponse[] {
  const parts = unframe(answer)
    .map((bytes) => fromBinary(CreateMessageResponseSchema, bytes))
    .filter((part) => part.part.case !== "settled");
  const head = parts[0]?.part;
  if (head?.case !== "head") throw new Error("a kept answer without a head");
  head.value.replayed = true;
  const last = parts.at(-1)?.part;
  const ended =
    last?.case === "event" && (last.value.event === "message_stop" || last.value.event === "error");
  if (head.value.stream && !ended)
    parts.push(
      create(CreateMessageResponseSchema, {
        part: { case: "event", value: { event: "error", data: CUT_SHORT } },
      }),
    );
  parts.push(create(CreateMessageResponseSchema, { part: { case: "settled", value: { charge: 0n } } }));
  return parts;
}

/** Whether a part is kept for a replay: everything but the keep-alives. */
function keptPart(part: CreateMessageResponse): boolean {
  if (part.part.case === "comment") return false;
  return !(part.part.case === "event" && part.part.value.event === "ping");
}

/** Parts as one buffer, each after its length (4 bytes, big-endian). */
function frames(parts: readonly Uint8Array[], size: number): Uint8Array {
  const out = Buffer.alloc(size);
  let offset = 0;
  for (const part of parts) {
    offset = out.writeUInt32BE(part.byteLength, offset);
    out.set(part, offset);
    offset += part.byteLength;
  }
  return out;
}

function unframe(answer: Uint8Array): Uint8Array[] {
  const buffer = Buffer.from(answer.buffer, answer.byteOffset, answer.byteLength);
  const parts: Uint8Array[] = [];
  for (let offset = 0; offset < buffer.length; ) {
    const length = buffer.readUInt32BE(offset);
    parts.push(buffer.subarray(offset + 4, offset + 4 + length));
    offset += 4 + length;
  }
  return parts;
}
