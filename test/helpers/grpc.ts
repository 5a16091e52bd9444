import {
  create,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";

/**
 * A real grpc-js client for a generated service: method paths and (de)serialisers come from the
 * protobuf-es descriptors, the transport is grpc-js's own HTTP/2 stack.
 */
export function grpcClient(service: DescService, coreUrl: string): grpc.Client {
  // biome-ignore lint/suspicious/noExplicitAny: grpc-js definitions are untyped at this level.
  const definition: Record<string, grpc.MethodDefinition<any, any>> = {};
  for (const method of service.methods) {
    definition[method.name] = {
      path: `/${service.typeName}/${method.name}`,
      requestStream: false,
      responseStream: method.methodKind === "server_streaming",
      // Requests may be plain objects: create() fills in defaults (and returns messages as they are).
      requestSerialize: (init: MessageInitShape<typeof method.input>) =>
        Buffer.from(toBinary(method.input, create(method.input, init))),
      requestDeserialize: (bytes: Buffer) => fromBinary(method.input, bytes),
      responseSerialize: (message: MessageShape<typeof method.output>) =>
        Buffer.from(toBinary(method.output, message)),
      responseDeserialize: (bytes: Buffer) => fromBinary(method.output, bytes),
      originalName: method.localName,
    };
  }
  const Client = grpc.makeGenericClientConstructor(definition as grpc.ServiceDefinition, service.name);
  return new Client(new URL(coreUrl).host, grpc.credentials.createInsecure());
}

/** Calls a unary method by its proto name with optional metadata; resolves or rejects with the ServiceError. */
export function unary<T>(
  client: grpc.Client,
  method: string,
  request: unknown,
  metadata: Record<string, string> = {},
): Promise<T> {
  const md = new grpc.Metadata();
  for (const [name, value] of Object.entries(metadata)) md.set(name, value);
  const call = (client as unknown as Record<string, (...args: unknown[]) => unknown>)[method];
  if (call === undefined) throw new Error(`no method ${method}`);
  return new Promise((resolve, reject) => {
    call.call(client, request, md, (error: grpc.ServiceError | null, response: T) =>
      error ? reject(error) : resolve(response),
    );
  });
}

/**
 * Calls a server-streaming method and collects every response; rejects with the ServiceError
 * if the stream ends in one. `onResponse` may cancel the call part-way.
 */
export function serverStream<T>(
  client: grpc.Client,
  method: string,
  request: unknown,
  metadata: Record<string, string> = {},
  onResponse: (response: T, call: grpc.ClientReadableStream<T>) => void = () => {},
): Promise<T[]> {
  const md = new grpc.Metadata();
  for (const [name, value] of Object.entries(metadata)) md.set(name, value);
  const start = (client as unknown as Record<string, (...args: unknown[]) => grpc.ClientReadableStream<T>>)[
    method
  ];
  if (start === undefined) throw new Error(`no method ${method}`);
  const call = start.call(client, request, md);
  const responses: T[] = [];
  return new Promise((resolve, reject) => {
    call.on("data", (response: T) => {
      responses.push(response);
      onResponse(response, call);
    });
    call.on("error", (error: grpc.ServiceError) =>
      error.code === grpc.status.CANCELLED ? resolve(responses) : reject(error),
    );
    call.on("end", () => resolve(responses));
  });
}
