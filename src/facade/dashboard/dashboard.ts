import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createContextValues, type Transport } from "@connectrpc/connect";
import { contentTypeRegExp } from "@connectrpc/connect/protocol-connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import type { FastifyInstance } from "fastify";
import { clientAddress } from "../authenticate.js";
import { clientAddressKey, DASHBOARD_RPC_PREFIX, dashboardRoutes } from "./bridge.js";

/** What `make build` writes for the page (esbuild; see the Makefile's `dashboard` target). */
const ASSETS = {
  "app.js": "text/javascript; charset=utf-8",
  "app.css": "text/css; charset=utf-8",
} as const;

// The page loads nothing from elsewhere: no CDN, no inline script, no framing.
const SECURITY_HEADERS = {
  "content-security-policy":
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

/** Options of the dashboard plugin. */
export interface DashboardOptions {
  readonly transport: Transport;
  readonly publicUrl: URL | undefined;
}

/**
 * The dashboard: its page and assets at /dashboard, and its Connect handlers at
 * /dashboard/rpc on the facade's HTTP/1.1 port.
 */
export async function dashboardPlugin(app: FastifyInstance, { transport, publicUrl }: DashboardOptions) {
  const files = loadBuiltPage();
  const page = (file: keyof typeof ASSETS | "index.html") => files?.get(file);

  await app.register(
    async (scope) => {
      // The Connect handlers answer a content type they do not take with a bare 415 written past
      // Fastify; refuse it here first, in the protocol's own error shape, saying what they take.
      scope.addHook("onRequest", async (request, reply) => {
        const type = request.headers["content-type"] ?? "";
        if (request.method !== "POST" || contentTypeRegExp.test(type)) return;
        return reply.code(415).send({
          code: "invalid_argument",
          message: `content-type ${JSON.stringify(type)} is not taken here: send application/json or application/proto (Connect)`,
        });
      });
      await scope.register(fastifyConnectPlugin, {
        routes: dashboardRoutes({ transport, publicUrl }),
        grpc: false,
        grpcWeb: false,
        contextValues: (request) => createContextValues().set(clientAddressKey, clientAddress(request)),
      });
    },
    { prefix: DASHBOARD_RPC_PREFIX },
  );

  const index = async (_request: unknown, reply: import("fastify").FastifyReply) => {
    const html = page("index.html");
    if (html === undefined) {
      return reply
        .code(503)
        .type("text/plain")
        .send("The dashboard is not built: run `npm run build` (or `make build`).");
    }
    return reply.headers(SECURITY_HEADERS).type("text/html; charset=utf-8").send(html);
  };
  app.get("/dashboard", index);
  app.get("/dashboard/", index);
  app.get<{ Params: { file: string } }>("/dashboard/assets/:file", async (request, reply) => {
    const name = request.params.file;
    const body = Object.hasOwn(ASSETS, name) ? page(name as keyof typeof ASSETS) : undefined;
    if (body === undefined) return reply.callNotFound();
    return reply
      .headers(SECURITY_HEADERS)
      .type(ASSETS[name as keyof typeof ASSETS])
      .send(body);
  });
}

/** The built page from `<package root>/dist/dashboard`, read once; undefined when not built. */
function loadBuiltPage(): Map<string, Buffer> | undefined {
  const dir = join(packageRoot(), "dist", "dashboard");
  const names = ["index.html", ...Object.keys(ASSETS)];
  if (!names.every((name) => existsSync(join(dir, name)))) return undefined;
  return new Map(names.map((name) => [name, readFileSync(join(dir, name))]));
}

/** The nearest directory above this module with a package.json: the checkout or the installed package. */
function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json"))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error("cannot find the package root of the dashboard");
    dir = parent;
  }
  return dir;
}
