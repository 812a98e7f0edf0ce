/**
 * The HTTP edge a node and a gateway both serve: one listener for both planes. A request for a
 * sandbox port (E2B headers, port-id Host, /proxy path, a signed /files URL) is sandbox
 * traffic, served before Fastify sees it; everything else is the control plane, behind the key
 * check. What differs between the two (how traffic reaches a sandbox, which routes there are)
 * is the caller's; the listener, its limits, the metrics and the public routes are here.
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from "fastify";
import type { Logger } from "pino";
import { operatorKeyCheck } from "./auth.js";
import { dashboardRoutes } from "./dashboard.js";
import { errorBodyOf, noRouteBody } from "./http-errors.js";
import { createLimitedServer, type HttpLimits, requestDeadline } from "./http-limits.js";
import { CONTENT_TYPE, countConnectionShed, countRequest, countUpgrade, scrape } from "./metrics.js";
import { type ProxyTarget, resolveTarget } from "./proxy-target.js";
import { endWithError } from "./socket-error.js";
import { installAuth, type KeyCalls } from "./tenancy.js";
import type { Tenants } from "./tenants.js";

export interface EdgeOptions {
  log: Logger;
  /** What Fastify's log lines are tagged with (`api` on a node, `gateway`). */
  component: string;
  /** The largest body Fastify reads (its own default when unset). */
  bodyLimitBytes?: number;
  /** Timeouts and the connection cap of the listener (slow clients cannot hold it). */
  limits: HttpLimits;
  /** The API keys: who may call the control plane, and whose connections the per-client cap spares. */
  tenants: Tenants;
  /** Counts each call against its key's limits (absent: not counted here). */
  keyCalls?: KeyCalls;
  /** A cluster node's check that a tenant's request came through a gateway (tenancy.ts). */
  viaGateway?: (headers: IncomingHttpHeaders) => boolean;
  /**
   * Whether a request is sandbox traffic: the function that serves it, or undefined for the
   * control plane. Control-plane requests get the listener's request deadline; traffic does not
   * (an upload or a stream may take longer than any API call).
   */
  traffic(req: IncomingMessage, res: ServerResponse): (() => void) | undefined;
  /** Sees each control-plane request first; `toFastify` hands it on (default: straight there). */
  api?(req: IncomingMessage, res: ServerResponse, toFastify: () => void): void;
  /** An upgrade (a WebSocket) for a sandbox port; one that names no sandbox is answered 404 here. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, target: ProxyTarget): void;
}

/**
 * Fastify on its own limited http.Server (http-limits.ts), with the key check, GET /metrics
 * and the dashboard registered, and E2B's error body for the router's own refusals and for a
 * path no route matches. The caller adds its error handler and its routes.
 */
export function buildEdge(o: EdgeOptions): FastifyInstance {
  const fastify = Fastify({
    // Per-request logs at info would drown the rest; errors are still logged.
    loggerInstance: o.log.child({ component: o.component }, { level: "warn" }) as FastifyBaseLogger,
    ...(o.bodyLimitBytes !== undefined ? { bodyLimit: o.bodyLimitBytes } : {}),
    // The listener's timeouts are set on the server itself (serverFactory, http-limits.ts).
    // The router's own refusals (a URL it cannot decode, a path parameter over 100
    // characters) answer in the E2B shape too.
    frameworkErrors: (err, _req, reply) => {
      const status = err.statusCode ?? 400;
      void (reply as FastifyReply).status(status).send(errorBodyOf(status, err.message));
    },
    serverFactory: (handler) => {
      const server = createLimitedServer(
        o.limits,
        (req, res) => {
          const serve = o.traffic(req, res);
          countRequest(res, serve ? "proxy" : "api");
          if (serve) return serve();
          requestDeadline(o.limits, req, res);
          if (o.api) o.api(req, res, () => handler(req, res));
          else handler(req, res);
        },
        { trusted: operatorKeyCheck(o.tenants), onShed: countConnectionShed },
      );
      server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        const target = resolveTarget(req);
        if (!target) {
          socket.on("error", () => socket.destroy());
          return endWithError(socket, 404, "no sandbox in this upgrade request");
        }
        countUpgrade();
        o.upgrade(req, socket, head, target);
      });
      return server;
    },
  });
  fastify.setNotFoundHandler((req, reply) => {
    void reply.status(404).send(noRouteBody(req.method, req.url));
  });
  installAuth(fastify, o.tenants, {
    ...(o.keyCalls ? { limits: o.keyCalls } : {}),
    ...(o.viaGateway ? { viaGateway: o.viaGateway } : {}),
  });
  // Prometheus, without the key like /health (docs/deployment.md#metrics).
  fastify.get("/metrics", { config: { public: true } }, async (_req, reply) =>
    reply.header("content-type", CONTENT_TYPE).send(await scrape()),
  );
  void fastify.register(dashboardRoutes);
  return fastify;
}
