import type { ConnectRouter, ConnectRouterOptions, Interceptor } from "@connectrpc/connect";
import { AuthService } from "../gen/tollgate/auth/v1/auth_pb.js";
import { HealthService } from "../gen/tollgate/health/v1/health_pb.js";
import { AuthRepository } from "../store/auth-repository.js";
import type { Db } from "../store/database.js";
import { createAuthService } from "./auth/auth-service.js";
import { Authenticator } from "./auth/authenticator.js";
import { type CallerResolver, callerInterceptor, headerCallerResolver } from "./caller.js";
import { toConnectError } from "./errors.js";
import { createHealthService } from "./health-service.js";

/** What the core is built from. */
export interface CoreDeps {
  readonly db: Db;
  /** Operator token accepted in `authorization: Bearer`; undefined disables operator calls over the network. */
  readonly adminToken?: string | undefined;
  readonly now?: () => number;
  /** Told about every failure that is masked as Internal, with its original cause. */
  readonly onInternalError?: (error: unknown, procedure: string) => void;
}

/** The core services, ready to be mounted on a server or an in-process transport. */
export interface Core {
  /** Registers every service on a router. */
  readonly routes: (router: ConnectRouter) => void;
  /** Router options for callers identified by their metadata (network and facade). */
  readonly routerOptions: ConnectRouterOptions;
  /** Router options with another caller resolver (the operator CLI). */
  routerOptionsFor(resolve: CallerResolver): ConnectRouterOptions;
}

/** Builds the core's services over an open database. Never listens. */
export function createCore(deps: CoreDeps): Core {
  const now = deps.now ?? Date.now;
  const repo = new AuthRepository(deps.db);
  const authenticator = new Authenticator(repo, now);
  const ping = deps.db.prepare("SELECT 1");
  const probes = [
    {
      name: "database",
      required: true,
      check: () => {
        ping.get();
        return "sqlite ok";
      },
    },
  ];
  const routes = (router: ConnectRouter) => {
    router.service(AuthService, createAuthService({ repo, authenticator, now }));
    router.service(HealthService, createHealthService(probes));
  };
  const masking: Interceptor = (next) => async (req) => {
    try {
      return await next(req);
    } catch (error) {
      const masked = toConnectError(error);
      if (masked !== error) deps.onInternalError?.(error, req.url);
      throw masked;
    }
  };
  const routerOptionsFor = (resolve: CallerResolver): ConnectRouterOptions => ({
    interceptors: [masking, callerInterceptor(resolve)],
  });
  return {
    routes,
    routerOptions: routerOptionsFor(headerCallerResolver(authenticator, deps.adminToken)),
    routerOptionsFor,
  };
}
