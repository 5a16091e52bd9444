import { create, type DescMethod, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ContextValues,
  createContextValues,
  createServiceImplSpec,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type StreamRequest,
  type StreamResponse,
  type Transport,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import { invokeUnaryImplementation } from "@connectrpc/connect/protocol";
import { provenFacadeKey } from "../core/auth/facade-proof.js";

/** The protocol name the core's handlers see for calls made through this transport. */
export const IN_PROCESS_PROTOCOL = "in-process";

/**
 * A Transport that calls the core's service implementations in this process directly: the
 * facade keeps its typed client, the core keeps its interceptors (caller resolution, error
 * masking) and handler context, but no message is serialised to protobuf and parsed back, and
 * no HTTP-shaped pipeline is built per call (the router transport's cost: about a fifth of the
 * CPU of a call and most of the memory of an open stream; docs/performance.md).
 *
 * Messages are passed by reference, so neither side may mutate what it received. Streaming
 * results are pulled one at a time by the consumer, and when the call's signal aborts (the
 * client went away, or the call finished), the implementation's iterator is returned, so its
 * `finally` blocks (a stream's settlement) always run.
 */
export function createInProcessTransport(
  routes: (router: ConnectRouter) => void,
  interceptors: readonly Interceptor[],
): Transport {
  const specs = new Map<DescMethod, MethodImplSpec>();
  const collector = {
    service(service, implementation) {
      for (const spec of Object.values(createServiceImplSpec(service, implementation).methods)) {
        specs.set(spec.method, spec);
      }
      return collector;
    },
    rpc() {
      throw new Error("the in-process transport registers whole services only");
    },
    handlers: [],
  } as ConnectRouter;
  routes(collector);
  const serverInterceptors = [...interceptors];

  const lookup = (method: DescMethod): MethodImplSpec => {
    const spec = specs.get(method);
    if (spec === undefined) {
      throw new ConnectError(
        `${method.parent.typeName}.${method.name} is not implemented`,
        Code.Unimplemented,
      );
    }
    return spec;
  };
  /** A handler context without the per-call signal plumbing of a network handler. */
  const contextFor = (
    method: DescMethod,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: ConstructorParameters<typeof Headers>[0],
    contextValues: ContextValues | undefined,
  ): HandlerContext => {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    const timeout = timeoutMs === undefined ? undefined : AbortSignal.timeout(timeoutMs);
    return {
      method,
      service: method.parent,
      requestMethod: "POST",
      protocolName: IN_PROCESS_PROTOCOL,
      url: `/${method.parent.typeName}/${method.name}`,
      signal:
        timeout === undefined
          ? (signal ?? NEVER)
          : signal === undefined
            ? timeout
            : AbortSignal.any([signal, timeout]),
      timeoutMs: () => (deadline === undefined ? undefined : deadline - Date.now()),
      requestHeader: new Headers(header),
      responseHeader: new Headers(),
      responseTrailer: new Headers(),
      // Only code in this process can call through here: the facade, trusted with what it asserts.
      values: (contextValues ?? createContextValues()).set(provenFacadeKey, true),
    };
  };

  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      const spec = lookup(method);
      if (spec.kind !== "unary") throw new ConnectError(`${method.name} is not unary`, Code.Internal);
      const context = contextFor(method, signal, timeoutMs, header, contextValues);
      try {
        const message = await invokeUnaryImplementation(
          spec,
          context,
          create(method.input, input),
          serverInterceptors,
        );
        return {
          stream: false,
          service: method.parent,
          method,
          header: context.responseHeader,
          trailer: context.responseTrailer,
          message: message as MessageShape<typeof method.output>,
        };
      } catch (error) {
        throw ConnectError.from(error);
      }
    },

    async stream(method, signal, timeoutMs, header, input, contextValues) {
      const spec = lookup(method);
      const context = contextFor(method, signal, timeoutMs, header, contextValues);
      // The core's services stream from the server only (inference.proto); as `unary` does for
      // a method of another kind, anything else is refused.
      if (spec.kind !== "server_streaming") {
        throw new ConnectError(`${method.name} is not server-streaming`, Code.Internal);
      }
      let response: StreamResponse;
      try {
        response = await serverStream(spec, context, input as AsyncIterable<unknown>, serverInterceptors);
      } catch (error) {
        throw ConnectError.from(error);
      }
      copyHeaders(response.header, context.responseHeader);
      const { trailer } = response;
      const messages: AsyncIterable<unknown> = response.message;
      const iterator = messages[Symbol.asyncIterator]();
      // An abandoned stream (client gone, deadline) ends the implementation's generator, so its
      // finally blocks (a stream's settlement) run even though nobody pulls any more.
      const stop = () => void iterator.return?.().catch(() => {});
      // NEVER aborts: no listener on it, whose list every call without a signal would share.
      if (context.signal.aborted) stop();
      else if (context.signal !== NEVER) context.signal.addEventListener("abort", stop, { once: true });
      const message: AsyncIterable<MessageShape<typeof method.output>> = {
        [Symbol.asyncIterator]: () => ({
          next: async () => {
            try {
              const result = await iterator.next();
              if (result.done !== true) {
                return {
                  done: false,
                  value: create(method.output, result.value as MessageInitShape<typeof method.output>),
                };
              }
              context.signal.removeEventListener("abort", stop);
              copyHeaders(trailer, context.responseTrailer);
              return result;
            } catch (error) {
              context.signal.removeEventListener("abort", stop);
              throw ConnectError.from(error);
            }
          },
        }),
      };
      return {
        stream: true,
        service: method.parent,
        method,
        header: context.responseHeader,
        trailer: context.responseTrailer,
        message,
      };
    },
  };
}

/**
 * A server-streaming call through the core's interceptors, as Connect's
 * `transformInvokeImplementation` runs one, but with no generator function made for the call.
 * Connect's runs the call inside a generator function created per call (tslib's
 * `__asyncGenerator(this, arguments, function* …)`); V8 gives each such closure its own map,
 * kept in old space, which holds the closure and so everything the call allocated through every
 * scavenge until the next full collection (docs/performance.md §28).
 */
async function serverStream(
  spec: Extract<MethodImplSpec, { kind: "server_streaming" }>,
  context: HandlerContext,
  input: AsyncIterable<unknown>,
  interceptors: readonly Interceptor[],
): Promise<StreamResponse> {
  const { method } = spec;
  const invoke = async (req: UnaryRequest | StreamRequest): Promise<StreamResponse> => ({
    stream: true,
    service: method.parent,
    method,
    header: context.responseHeader,
    trailer: context.responseTrailer,
    // The request as a full message, as a network call delivers it; the responses are made full
    // messages as they are pulled (the transport's `next`), as Connect normalises them.
    message: spec.impl(
      create(method.input, await single(req.message as AsyncIterable<Record<string, unknown>>, method.name)),
      {
        ...context,
        service: req.service,
        requestHeader: req.header,
        signal: req.signal,
        values: req.contextValues,
      },
    ) as AsyncIterable<never>,
  });
  const next = interceptors.reduceRight<
    (req: UnaryRequest | StreamRequest) => Promise<UnaryResponse | StreamResponse>
  >((inner, interceptor) => interceptor(inner), invoke);
  return (await next({
    stream: true,
    service: method.parent,
    method,
    requestMethod: context.requestMethod,
    url: context.url,
    signal: context.signal,
    header: context.requestHeader,
    contextValues: context.values,
    message: input,
  } as StreamRequest)) as StreamResponse;
}

/** The one request message of a server-streaming call (Connect's `ensureSingle`). */
async function single<T>(input: AsyncIterable<T>, method: string): Promise<T> {
  const iterator = input[Symbol.asyncIterator]();
  const first = await iterator.next();
  if (first.done === true) {
    throw new ConnectError(`protocol error: missing input message for ${method} method`, Code.Unimplemented);
  }
  if ((await iterator.next()).done !== true) {
    throw new ConnectError(
      `protocol error: received extra input message for ${method} method`,
      Code.Unimplemented,
    );
  }
  return first.value;
}

/** Replaces `to`'s entries with `from`'s, unless they are one object (as Connect copies them). */
function copyHeaders(from: Headers, to: Headers): void {
  if (from === to) return;
  for (const key of [...to.keys()]) to.delete(key);
  for (const [key, value] of from) to.set(key, value);
}

/** The signal of a call nobody can cancel. */
const NEVER = new AbortController().signal;
