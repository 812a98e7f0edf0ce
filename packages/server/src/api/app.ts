import type { IncomingHttpHeaders } from "node:http";
import { apiKeyRoutes } from "@aenv/edge/api-key-routes";
import { bearerKeyMatcher } from "@aenv/edge/auth";
import { buildEdge } from "@aenv/edge/edge";
import { hasGatewayProof } from "@aenv/edge/gateway-proof";
import { errorBodyOf } from "@aenv/edge/http-errors";
import type { HttpLimits } from "@aenv/edge/http-limits";
import { resolveTarget } from "@aenv/edge/proxy-target";
import { signedFilesTarget } from "@aenv/edge/signed-files";
import { endWithError } from "@aenv/edge/socket-error";
import { callerOf, installOwnership, type OwnedKind } from "@aenv/edge/tenancy";
import type { Tenants } from "@aenv/edge/tenants";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { z } from "zod";
import type { Webhooks } from "../events/webhooks.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import { SandboxProxy, sendError } from "../proxy/proxy.js";
import type { SecretStore } from "../secrets/store.js";
import type { TemplateStore } from "../state/template-catalog.js";
import type { VolumeCatalog } from "../storage/volumes/catalog.js";
import type { VolumeContent } from "../storage/volumes/content.js";
import type { TemplateBuilder } from "../templates/builder.js";
import type { ContextFiles } from "../templates/context-files.js";
import type { OnDemandImages } from "../templates/on-demand.js";
import type { LocalKeyLimits } from "../tenancy/limits.js";
import { installErrorHandling } from "./error-handler.js";
import { type PeerFiles, peerRoutes } from "./routes/peers.js";
import { sandboxLogRoutes } from "./routes/sandbox-logs.js";
import { sandboxRoutes } from "./routes/sandboxes.js";
import { secretRoutes } from "./routes/secrets.js";
import { teamRoutes } from "./routes/teams.js";
import { templateRoutes } from "./routes/templates.js";
import { volumeContentRoutes } from "./routes/volume-content.js";
import { volumeRoutes } from "./routes/volumes.js";
import { webhookRoutes } from "./routes/webhooks.js";

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
  /** A cluster node: tenants' keys are taken only through a gateway (@aenv/edge/gateway-proof). */
  clusterNode?: boolean;
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

const SignerQuery = z.object({ url: z.string().max(8192), method: z.enum(["GET", "POST"]) });

/**
 * The node's edge (@aenv/edge/edge.ts): sandbox traffic goes to this node's proxy, a signed
 * /files URL to the sandbox whose token signed it; everything else is the control-plane API.
 */
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
  const viaGateway = o.clusterNode ? (h: IncomingHttpHeaders) => hasGatewayProof(o.apiKey, h) : undefined;
  const fastify = buildEdge({
    log: o.log,
    component: "api",
    bodyLimitBytes: o.bodyLimitBytes,
    limits: o.limits,
    tenants: o.tenants,
    ...(o.keyLimits ? { keyCalls: o.keyLimits } : {}),
    ...(viaGateway ? { viaGateway } : {}),
    traffic: (req, res) => {
      const target = resolveTarget(req);
      if (target) return () => proxy.handle(req, res, target);
      const signed = signedFilesTarget(req, (m) => o.orch.sandboxByEnvdToken(m));
      if (!signed) return undefined;
      if ("refusal" in signed) {
        return () => {
          req.resume();
          sendError(res, 401, signed.refusal);
        };
      }
      return () => proxy.handle(req, res, signed.target);
    },
    upgrade: (req, socket, head, target) => proxy.handleUpgrade(req, socket, head, target),
  });
  // Malformed requests from the network are answered 400 by Node and never reach us.
  fastify.server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
    if (socket.writable && err.code !== "ECONNRESET") {
      endWithError(socket, 400, `bad request: ${err.code ?? err.message}`);
    } else socket.destroy();
  });
  installErrorHandling(fastify);
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
    tenantOfKey: (req) => callerOf(o.tenants, req.headers, viaGateway),
  });
  void fastify.register(secretRoutes, { secrets: o.secrets });
  void fastify.register(webhookRoutes, { webhooks: o.webhooks });
  void fastify.register(teamRoutes, { orch: o.orch });
  void fastify.register(apiKeyRoutes, { tenants: o.tenants });
  return { fastify, proxy };
}

/** How the ownership check finds who owns what a path parameter names (@aenv/edge/tenancy.ts). */
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

/** The node's own routes: health, itself as a node, the gateway's signer query. */
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
  const nodes = o.nodes;
  if (nodes) app.get("/nodes", async () => nodes());
  // A gateway asks each node which of its sandboxes signed a /files URL (@aenv/edge/signed-files.ts).
  app.post("/cluster/files-signer", async (req, reply) => {
    const b = SignerQuery.parse(req.body ?? {});
    const found = signedFilesTarget(b, (m) => o.orch.sandboxByEnvdToken(m));
    if (found && "target" in found) return { sandboxId: found.target.sandboxId };
    return reply.status(404).send(errorBodyOf(404, found ? found.refusal : "not a signed /files URL"));
  });
}
