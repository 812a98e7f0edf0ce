import type { IncomingMessage, ServerResponse } from "node:http";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from "fastify";
import type { Logger } from "pino";
import { z } from "zod";
import type { Webhooks } from "../events/webhooks.js";
import { errorBodyOf } from "../http-errors.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import { SandboxProxy, sendError } from "../proxy/proxy.js";
import { signedFilesTarget } from "../proxy/signed-files.js";
import { resolveTarget } from "../proxy/target.js";
import type { SecretStore } from "../secrets/store.js";
import type { TemplateStore } from "../state/template-catalog.js";
import type { VolumeCatalog } from "../storage/volumes/catalog.js";
import type { VolumeContent } from "../storage/volumes/content.js";
import { CONTENT_TYPE, countConnectionShed, countRequest, countUpgrade, scrape } from "../telemetry/prometheus.js";
import type { TemplateBuilder } from "../templates/builder.js";
import type { ContextFiles } from "../templates/context-files.js";
import type { OnDemandImages } from "../templates/on-demand.js";
import type { LocalKeyLimits } from "../tenancy/limits.js";
import type { Tenants } from "../tenancy/tenants.js";
import { createLimitedServer, type HttpLimits, requestDeadline } from "../util/http-limits.js";
import { endWithError } from "../util/socket-error.js";
import { bearerKeyMatcher, operatorKeyCheck } from "./auth.js";
import { dashboardRoutes } from "./dashboard.js";
import { installErrorHandling } from "./error-handler.js";
import { apiKeyRoutes } from "./routes/api-keys.js";
import { type PeerFiles, peerRoutes } from "./routes/peers.js";
import { sandboxLogRoutes } from "./routes/sandbox-logs.js";
import { sandboxRoutes } from "./routes/sandboxes.js";
import { secretRoutes } from "./routes/secrets.js";
import { teamRoutes } from "./routes/teams.js";
import { templateRoutes } from "./routes/templates.js";
import { volumeContentRoutes } from "./routes/volume-content.js";
import { volumeRoutes } from "./routes/volumes.js";
import { webhookRoutes } from "./routes/webhooks.js";
import { installAuth, installOwnership, type OwnedKind, tenantOfHeaders } from "./tenancy.js";

export interface AppOptions {
  orch: Orchestrator;
  templates: TemplateStore;
  builder: TemplateBuilder;
  onDemand: OnDemandImages;
  /** What this node serves the cluster's other nodes of its images. */
  peerFiles: PeerFiles;
  files: ContextFiles;
  volumes: VolumeCatalog;
  volumeContent: VolumeContent;
  secrets: SecretStore;
  webhooks: Webhooks;
  log: Logger;
  apiKey: string;
  /** The API keys: the operator's (apiKey) and tenants'. */
  tenants: Tenants;
  /** A node of its own enforces keys' limits; behind gateways they do (absent here). */
  keyLimits?: LocalKeyLimits;
  domain: string;
  bodyLimitBytes: number;
  /** Timeouts and the connection cap of the listener (slow clients cannot hold it). */
  limits: HttpLimits;
  health: () => Record<string, unknown>;
  /** A cluster node answers GET /nodes about itself. */
  nodes?: () => unknown[];
}

export interface App {
  fastify: FastifyInstance;
  proxy: SandboxProxy;
}

/**
 * One listener for both planes: requests for a sandbox port (E2B headers, port-id Host,
 * /proxy path) are dispatched to the proxy before Fastify sees them; everything else is
 * the control-plane API.
 */
const SignerQuery = z.object({ url: z.string().max(8192), method: z.enum(["GET", "POST"]) });

export function buildApp(o: AppOptions): App {
  const proxy = new SandboxProxy(
    { route: (id) => o.orch.route(id), access: (id) => o.orch.access(id) },
    o.log.child({ component: "proxy" }),
    // Authorization: Bearer <API key> was meant for aenv, not for the sandbox.
    bearerKeyMatcher(o.tenants),
    o.limits,
  );
  o.orch.onStopped((id) => proxy.forget(id));
  // A sandbox with a client stream open (a running command, a WebSocket) is never idle.
  o.orch.hibernation.setBusyCheck((id) => proxy.hasOpenConnections(id));
  const hasKey = operatorKeyCheck(o.tenants);
  const fastify = Fastify({
    // Per-request logs at info would drown the rest; errors are still logged.
    loggerInstance: o.log.child({ component: "api" }, { level: "warn" }) as FastifyBaseLogger,
    bodyLimit: o.bodyLimitBytes,
    // The listener's timeouts are set on the server itself (serverFactory, util/http-limits.ts).
    // The router's own refusals (a URL it cannot decode, a path parameter over 100
    // characters) answer in the E2B shape too.
    frameworkErrors: (err, _req, reply) => {
      const status = err.statusCode ?? 400;
      void (reply as FastifyReply).status(status).send(errorBodyOf(status, err.message));
    },
    serverFactory: (handler) => {
      const server = createLimitedServer(
        o.limits,
        (req: IncomingMessage, res: ServerResponse) => {
          let target = resolveTarget(req);
          if (!target) {
            const signed = signedFilesTarget(req, (m) => o.orch.sandboxByEnvdToken(m));
            if (signed && "refusal" in signed) {
              countRequest(res, "proxy");
              req.resume();
              sendError(res, 401, signed.refusal);
              return;
            }
            target = signed?.target;
          }
          countRequest(res, target ? "proxy" : "api");
          if (target) proxy.handle(req, res, target);
          else {
            requestDeadline(o.limits, req, res);
            handler(req, res);
          }
        },
        { trusted: hasKey, onShed: countConnectionShed },
      );
      server.on("upgrade", (req, socket, head) => {
        const target = resolveTarget(req);
        if (target) countUpgrade();
        if (target) proxy.handleUpgrade(req, socket, head, target);
        else {
          socket.on("error", () => socket.destroy());
          endWithError(socket, 404, "no sandbox in this upgrade request");
        }
      });
      // Malformed requests from the network are answered 400 by Node and never reach us.
      server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
        if (socket.writable && err.code !== "ECONNRESET") {
          endWithError(socket, 400, `bad request: ${err.code ?? err.message}`);
        } else socket.destroy();
      });
      return server;
    },
  });
  installErrorHandling(fastify);
  installAuth(fastify, o.tenants, o.keyLimits);
  installOwnership(fastify, ownedKinds(o));
  void fastify.register(nodeRoutes, { health: o.health, nodes: o.nodes, orch: o.orch });
  void fastify.register(peerRoutes, { files: o.peerFiles, onDemand: o.onDemand });
  void fastify.register(sandboxRoutes, {
    orch: o.orch,
    onDemand: o.onDemand,
    ctx: { domain: o.domain },
    secretBinding: (name, owner) => o.secrets.bindingOf(name, owner),
    ...(o.keyLimits ? { keyLimits: o.keyLimits } : {}),
  });
  void fastify.register(sandboxLogRoutes, { orch: o.orch });
  void fastify.register(templateRoutes, {
    templates: o.templates,
    builder: o.builder,
    files: o.files,
    orch: o.orch,
  });
  void fastify.register(volumeRoutes, { volumes: o.volumes, orch: o.orch });
  void fastify.register(volumeContentRoutes, {
    volumes: o.volumes,
    content: o.volumeContent,
    tenantOfKey: (req) => tenantOfHeaders(o.tenants, req.headers),
  });
  void fastify.register(secretRoutes, { secrets: o.secrets });
  void fastify.register(webhookRoutes, { webhooks: o.webhooks });
  void fastify.register(teamRoutes, { orch: o.orch });
  void fastify.register(apiKeyRoutes, { tenants: o.tenants });
  void fastify.register(dashboardRoutes);
  return { fastify, proxy };
}

/** How the ownership check finds who owns what a path parameter names (api/tenancy.ts). */
function ownedKinds(o: AppOptions): Record<string, OwnedKind> {
  const template = (id: string) => {
    const t = o.templates.get(id);
    return t ? { owner: t.owner, shared: !t.owner || t.public } : undefined;
  };
  return {
    sandboxID: { kind: "sandbox", find: (id) => o.orch.registry.get(id)?.rec },
    // Snapshots are looked up by their routes among the caller's own (a name is each key's newest build).
    templateID: { kind: "template", find: template },
    alias: { kind: "template", find: template },
    volumeID: { kind: "volume", find: (id) => o.volumes.get(id) },
    webhookID: { kind: "webhook", find: (id) => o.webhooks.find(id) },
  };
}

/** The node's own routes: health, Prometheus metrics, itself as a node, the gateway's signer query. */
export async function nodeRoutes(
  app: FastifyInstance,
  o: Pick<AppOptions, "health" | "nodes" | "orch">,
): Promise<void> {
  app.get("/health", async (_req, reply) => {
    const h = o.health();
    if (h.ready) return reply.status(204).send();
    return reply.status(503).send({ ...errorBodyOf(503, "starting"), ...h });
  });
  app.get("/health/details", async () => o.health());
  // Prometheus, without the key like /health (docs/deployment.md#metrics).
  app.get("/metrics", { config: { public: true } }, async (_req, reply) =>
    reply.header("content-type", CONTENT_TYPE).send(await scrape()),
  );
  const nodes = o.nodes;
  if (nodes) app.get("/nodes", async () => nodes());
  // A gateway asks each node which of its sandboxes signed a /files URL (proxy/signed-files.ts).
  app.post("/cluster/files-signer", async (req, reply) => {
    const b = SignerQuery.parse(req.body ?? {});
    const found = signedFilesTarget(b, (m) => o.orch.sandboxByEnvdToken(m));
    if (found && "target" in found) return { sandboxId: found.target.sandboxId };
    return reply.status(404).send(errorBodyOf(404, found ? found.refusal : "not a signed /files URL"));
  });
}
