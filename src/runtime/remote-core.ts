import type { Interceptor, Transport } from "@connectrpc/connect";
import { FACADE_TOKEN_HEADER } from "../core/auth/facade-proof.js";

/**
 * A gRPC transport to a core elsewhere (facade-only mode, and the CLI with TOLLGATE_CORE_URL).
 * With `bearer`, every call presents it (the CLI's operator token); with `facadeToken`, every
 * call proves it comes from a facade tier (TOLLGATE_FACADE_TOKEN). The HTTP/2 client
 * (@connectrpc/connect-node) is loaded at the first call, so that processes on a local core,
 * such as the CLI's commands, start without it.
 */
export function remoteCoreTransport(baseUrl: string, bearer?: string, facadeToken?: string): Transport {
  const interceptors: Interceptor[] = [];
  if (bearer !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set("authorization", `Bearer ${bearer}`);
      return next(req);
    });
  }
  if (facadeToken !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set(FACADE_TOKEN_HEADER, facadeToken);
      return next(req);
    });
  }
  let grpc: Promise<Transport> | undefined;
  const opened = () =>
    (grpc ??= import("@connectrpc/connect-node").then(({ createGrpcTransport }) =>
      createGrpcTransport({ baseUrl, interceptors }),
    ));
  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      return await (await opened()).unary(method, signal, timeoutMs, header, input, contextValues);
    },
    async stream(method, signal, timeoutMs, header, input, contextValues) {
      return await (await opened()).stream(method, signal, timeoutMs, header, input, contextValues);
    },
  };
}
