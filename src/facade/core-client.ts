import type {
  DescMessage,
  DescMethodServerStreaming,
  DescService,
  MessageInitShape,
  MessageShape,
} from "@bufbuild/protobuf";
import {
  type CallOptions,
  type Client,
  createClient,
  type StreamResponse,
  type Transport,
} from "@connectrpc/connect";

/**
 * The facade's client of a core service: Connect's `createClient`, except that a server-streaming
 * method (CreateMessage) makes no generator function per call. Connect's makes two (its request
 * iterable and its response wrapper are tslib's `__asyncGenerator(this, arguments, function* …)`),
 * and V8 gives each such closure its own map, kept in old space, which holds the closure, and so
 * everything the call allocated, through every scavenge until the next full collection
 * (docs/performance.md §28). The calls behave as Connect's: the request is sent as a one-message
 * stream, `onHeader` and `onTrailer` are called, and the result can only be iterated forward.
 */
export function createCoreClient<T extends DescService>(service: T, transport: Transport): Client<T> {
  const client = createClient(service, transport) as Record<string, unknown>;
  for (const method of service.methods) {
    if (method.methodKind !== "server_streaming") continue;
    client[method.localName] = (input: MessageInitShape<DescMessage>, options?: CallOptions) =>
      new ServerStream(
        transport.stream(
          method as DescMethodServerStreaming,
          options?.signal,
          options?.timeoutMs,
          options?.headers,
          new OneMessage(input),
          options?.contextValues,
        ),
        options,
      );
  }
  return client as Client<T>;
}

/** The responses of a server-streaming call, read once its response (headers) has arrived. */
class ServerStream<O extends DescMessage> implements AsyncIterable<MessageShape<O>> {
  readonly #response: Promise<StreamResponse<DescMessage, O>>;
  readonly #options: CallOptions | undefined;
  #trailer: Headers | undefined;
  #messages: AsyncIterator<MessageShape<O>> | undefined;

  constructor(response: Promise<StreamResponse<DescMessage, O>>, options: CallOptions | undefined) {
    this.#response = response;
    this.#options = options;
    // A call nobody reads fails quietly; a reader still gets the failure from `next`.
    response.catch(() => {});
  }

  [Symbol.asyncIterator](): AsyncIterator<MessageShape<O>> {
    // Only `next`, as Connect's: nothing downstream can end the call but its own signal.
    return { next: () => this.#next() };
  }

  async #next(): Promise<IteratorResult<MessageShape<O>>> {
    if (this.#messages === undefined) {
      const response = await this.#response;
      this.#options?.onHeader?.(response.header);
      this.#trailer = response.trailer;
      this.#messages = response.message[Symbol.asyncIterator]();
    }
    const result = await this.#messages.next();
    if (result.done === true) this.#options?.onTrailer?.(this.#trailer!);
    return result;
  }
}

/** A request stream of one message. */
class OneMessage<T> implements AsyncIterableIterator<T> {
  #message: T | undefined;
  #sent = false;

  constructor(message: T) {
    this.#message = message;
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }

  async next(): Promise<IteratorResult<T>> {
    if (this.#sent) return { done: true, value: undefined };
    this.#sent = true;
    const message = this.#message as T;
    this.#message = undefined;
    return { done: false, value: message };
  }

  // Connect's network transports pipe the request stream through transforms that need `throw`.
  async throw(error?: unknown): Promise<IteratorResult<T>> {
    this.#sent = true;
    this.#message = undefined;
    throw error;
  }

  async return(): Promise<IteratorResult<T>> {
    this.#sent = true;
    this.#message = undefined;
    return { done: true, value: undefined };
  }
}
