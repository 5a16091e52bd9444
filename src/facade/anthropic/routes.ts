import { type Client, Code, ConnectError } from "@connectrpc/connect";
import type { FastifyPluginAsync } from "fastify";
import type { AuthService } from "../../gen/tollgate/auth/v1/auth_pb.js";
import { authenticateHook } from "../authenticate.js";
import { anthropicErrorHandler } from "./envelope.js";

/** What the Anthropic-format scope needs from the core. */
export interface AnthropicRoutesDeps {
  readonly auth: Client<typeof AuthService>;
}

/** The Anthropic messages-format routes, with their own authentication and error envelope. */
export const anthropicRoutes: FastifyPluginAsync<AnthropicRoutesDeps> = async (scope, { auth }) => {
  scope.setErrorHandler(anthropicErrorHandler);
  scope.addHook("onRequest", authenticateHook(auth));

  const notYet = async () => {
    throw new ConnectError("This endpoint is not implemented yet.", Code.Unimplemented);
  };
  scope.post("/v1/messages", notYet);
  scope.post("/v1/messages/count_tokens", notYet);
};
