import type { Transport } from "@connectrpc/connect";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from "fastify";
import { newRequestId } from "../core/ids.js";
import { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { BillingService } from "../gen/tollgate/billing/v1/billing_pb.js";
import { HealthService } from "../gen/tollgate/health/v1/health_pb.js";
import { InferenceService } from "../gen/tollgate/inference/v1/inference_pb.js";
import { anthropicErrorBody, anthropicErrorHandler } from "./anthropic/envelope.js";
import { anthropicRoutes } from "./anthropic/routes.js";
import { type ClientTimeouts, clientTimeoutOptions, DEFAULT_CLIENT_TIMEOUTS } from "./client-limits.js";
import { remoteCoreTransport } from "./core-call.js";
import { createCoreClient } from "./core-client.js";
import { dashboardPlugin } from "./dashboard/dashboard.js";
import { healthRoutes } from "./health.js";
import type { FacadeError } from "./http-status.js";
import { addMetricsHooks, type RequestMetrics } from "./metrics-hook.js";
import { openaiErrorBody } from "./openai/envelope.js";
import { openaiRoutes } from "./openai/routes.js";
import type { UploadLimits } from "./openai/uploads.js";
import { receiptRoutes } from "./receipts/routes.js";
import { unreadBodyHook } from "./request-body.js";
import { addClientGoneLog, RequestLogController } from "./request-log.js";

/** What the facade is built from: only a transport to the core, never the store or upstreams. */
export interface FacadeDeps {
  readonly transport: Transport;
  /**
   * Where the core is: {@link IN_PROCESS_CORE}, or its URL (then callers' keys are forwarded to
   * it as `x-api-key`). Shown by the health route.
   */
  readonly coreLocation: string;
  /** The gateway's logger (see src/logger.ts); nothing is logged when absent. */
  readonly logger?: FastifyBaseLogger | undefined;
  /**
   * The gateway's public origin (TOLLGATE_PUBLIC_URL): what the dashboard's sign-in expects, what
   * receipts and x402 name, and where `url` images are served; absent, the core's own (for
   * sign-ins) or the request's (for images), never the Host header for a sign-in.
   */
  readonly publicUrl?: URL | undefined;
  /** Upload limits of the image routes. */
  readonly images?: UploadLimits | undefined;
  /** How long slow clients are waited for (the config defaults when absent). */
  readonly clientTimeouts?: ClientTimeouts | undefined;
  /**
   * The proxies whose X-Forwarded-For (and -Proto, -Host) is believed (TOLLGATE_TRUST_PROXY); none
   * when empty or absent, so a client cannot choose the address its failures are counted under.
   */
  readonly trustProxy?: readonly string[] | undefined;
  /** Where every request is counted and timed (the metrics endpoint); nowhere when absent. */
  readonly metrics?: RequestMetrics | undefined;
  /**
   * Whether x402's door is served: the billed routes under `/x402` (`/x402/v1/messages`,
   * `/x402/v1/images/generations`, `/x402/v1/images/edits`), paid with x402 and no key
   * (docs/x402.md). The `/v1` routes take keys only, whatever this says.
   */
  readonly x402?: boolean | undefined;
  /**
   * The largest body a call on x402's door may send before it carries an x402 payment: JSON
   * bodies (messages, image generations) and image edits' uploads (the config defaults when absent).
   */
  readonly unpaidBodyBytes?: { readonly json: number; readonly upload: number } | undefined;
  /**
   * Whether an x402 payment header is signed by the payer it names, checked locally (no RPC):
   * only such a payment lifts `unpaidBodyBytes` (src/chains/x402/payment-signature.ts, wired by
   * the runtime). Absent, no payment lifts it.
   */
  readonly x402PaymentSigned?: ((header: string) => Promise<boolean>) | undefined;
}

/** The {@link FacadeDeps.coreLocation} of a core in this process, called through the in-process transport. */
export const IN_PROCESS_CORE = "in-process";

/** Where x402's door is: the keyed API's routes under this base (`{origin}/x402`). */
export const X402_PREFIX = "/x402";

/** Whether a path is one of the image routes' (which answer in the OpenAI envelope). */
function isImagesPath(url: string): boolean {
  return url.startsWith("/v1/images") || url.startsWith(`${X402_PREFIX}/v1/images`);
}

/** Upload limits when none are configured (the config defaults). */
const DEFAULT_UPLOAD_LIMITS: UploadLimits = {
  maxFileBytes: 10 * 1024 * 1024,
  maxRequestBytes: 50 * 1024 * 1024,
};

/** What a keyless call may send before it pays, when none is configured (the config defaults). */
const DEFAULT_UNPAID_BODY_BYTES = { json: 1024 * 1024, upload: 4 * 1024 * 1024 };

/** Builds the public HTTP/1.1 facade. Never listens; `main.ts` does. */
export async function buildFacade({
  transport,
  coreLocation,
  logger,
  publicUrl,
  images,
  clientTimeouts = DEFAULT_CLIENT_TIMEOUTS,
  trustProxy = [],
  metrics,
  x402 = false,
  unpaidBodyBytes = DEFAULT_UNPAID_BODY_BYTES,
  x402PaymentSigned = async () => false,
}: FacadeDeps): Promise<FastifyInstance> {
  const app = Fastify({
    ...clientTimeoutOptions(clientTimeouts),
    ...(logger === undefined ? { logger: false } : { loggerInstance: logger }),
    // One line per request instead of Fastify's two; its fields are named like the core's.
    logController: new RequestLogController(),
    trustProxy: trustProxy.length === 0 ? false : [...trustProxy],
    // Ids are always the gateway's own: a client-chosen id must never collide with a billing id.
    genReqId: newRequestId,
    requestIdHeader: false,
    // Anthropic's documented request limit (docs/protocols.md, "Request size").
    bodyLimit: 32 * 1024 * 1024,
    return503OnClosing: true,
    // A path Fastify cannot decode (`/v1/models%`) is refused before any hook runs: answer it in
    // the envelope of the scope the path names, with the request id like any other answer.
    frameworkErrors: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      const refusal: FacadeError = {
        status: 400,
        message: `The request path is not valid: ${error.message}`,
        reason: undefined,
        field: undefined,
        chain: undefined,
        metadata: {},
      };
      reply.header("x-request-id", request.id).code(400);
      return isImagesPath(request.url)
        ? reply.send(openaiErrorBody(refusal))
        : reply.send(anthropicErrorBody(refusal, request.id));
    },
  });
  app.decorateRequest("caller", null);
  app.decorateRequest("publicOrigin", "");
  app.decorateRequest("unpaidBodyLimit", undefined);
  app.decorateRequest("charge", null);
  app.decorate("x402PaymentSigned", x402PaymentSigned);
  app.addHook("onRequest", async (request, reply) => {
    reply.header("x-request-id", request.id);
    request.publicOrigin = publicUrl?.origin ?? `${request.protocol}://${request.host}`;
  });
  addClientGoneLog(app);
  if (metrics !== undefined) addMetricsHooks(app, metrics);
  // A 413, or any answer sent before the body was read, closes the connection once drained.
  app.addHook("onSend", unreadBodyHook());

  // A core over the network authenticates the caller's key itself (core-call.ts).
  const core = coreLocation === IN_PROCESS_CORE ? transport : remoteCoreTransport(transport);
  const auth = createCoreClient(AuthService, core);
  const health = createCoreClient(HealthService, core);
  const inference = createCoreClient(InferenceService, core);

  // Anything outside the two format scopes answers in the Anthropic envelope, the primary format.
  app.setErrorHandler(anthropicErrorHandler);
  app.setNotFoundHandler((request, reply) =>
    reply.code(404).send(
      anthropicErrorBody(
        {
          status: 404,
          message: `No route ${request.method} ${request.url}.`,
          reason: undefined,
          field: undefined,
          chain: undefined,
          metadata: {},
        },
        request.id,
      ),
    ),
  );

  // The warm-up probe Claude Code sends to the origin (`HEAD /`) must answer at once.
  app.get("/", async () => ({ name: "tollgate", docs: "/v1/health" }));

  await app.register(healthRoutes, { health, coreLocation });
  const stallMs = clientTimeouts.stallMs;
  const imageOptions = {
    auth,
    inference,
    limits: images ?? DEFAULT_UPLOAD_LIMITS,
    publicUrl: publicUrl?.origin,
  };
  const text = { auth, inference, stallMs, unpaidBodyBytes: unpaidBodyBytes.json };
  const image = { ...imageOptions, unpaidUploadBytes: unpaidBodyBytes.upload };
  await app.register(anthropicRoutes, { ...text, door: "keyed" });
  await app.register(openaiRoutes, { ...image, door: "keyed", prefix: "/v1/images" });
  if (x402) {
    await app.register(anthropicRoutes, { ...text, door: "x402", prefix: X402_PREFIX });
    await app.register(openaiRoutes, { ...image, door: "x402", prefix: `${X402_PREFIX}/v1/images` });
  }
  await app.register(receiptRoutes, {
    auth,
    billing: createCoreClient(BillingService, core),
    keyless: x402,
  });
  await app.register(dashboardPlugin, { transport, publicUrl });
  return app;
}
