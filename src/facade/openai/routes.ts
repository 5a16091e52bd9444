import { type Client, Code, ConnectError } from "@connectrpc/connect";
import type { FastifyPluginAsync } from "fastify";
import type { AuthService } from "../../gen/tollgate/auth/v1/auth_pb.js";
import { authenticateHook } from "../authenticate.js";
import { openaiErrorHandler } from "./envelope.js";

/** What the OpenAI-images-format scope needs from the core. */
export interface OpenaiRoutesDeps {
  readonly auth: Client<typeof AuthService>;
}

/** The OpenAI images-format routes, with their own authentication and error envelope. */
export const openaiRoutes: FastifyPluginAsync<OpenaiRoutesDeps> = async (scope, { auth }) => {
  scope.setErrorHandler(openaiErrorHandler);
  scope.setNotFoundHandler((request, reply) =>
    openaiErrorHandler(
      Object.assign(new Error(`No route ${request.method} ${request.url}.`), { statusCode: 404 }),
      request,
      reply,
    ),
  );
  scope.addHook("onRequest", authenticateHook(auth));
  // Edits arrive as multipart; until the images issue parses them, the body is left unread.
  scope.addContentTypeParser("multipart/form-data", (_request, _payload, done) => done(null, undefined));

  const notYet = async () => {
    throw new ConnectError("This endpoint is not implemented yet.", Code.Unimplemented);
  };
  scope.post("/generations", notYet);
  scope.post("/edits", notYet);
};
