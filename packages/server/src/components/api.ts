import { type App, type AppOptions, buildApp } from "../api/app.js";
import type { ServerConfig } from "../config.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import type { ChunkRepository } from "../storage/repository/chunk-repository.js";
import { registerNode } from "../telemetry/prometheus.js";
import type { Component } from "./component.js";

export interface Api extends Component {
  app: App;
  /** The port it listens on (cfg.port, or the one the OS chose for 0). */
  port: number;
}

export interface ApiDeps {
  cfg: ServerConfig;
  orch: Orchestrator;
  repository: ChunkRepository;
  ready: () => boolean;
  draining: () => boolean;
}

/** The node's HTTP endpoint (E2B API, envd traffic, the sandbox proxy) and its Prometheus gauges, listening. */
export async function startApi(d: ApiDeps, options: AppOptions): Promise<Api> {
  const { cfg, orch } = d;
  const app = buildApp(options);
  registerNode({
    // Build sandboxes (ephemeral) are not users' sandboxes.
    sandboxes: () => orch.registry.all().flatMap((l) => (l.ephemeral ? [] : [l.rec])),
    capacity: cfg.maxSandboxes,
    ready: d.ready,
    draining: d.draining,
    cache: () => d.repository.metrics(),
  });
  await app.fastify.listen({ host: cfg.host, port: cfg.port });
  const addr = app.fastify.server.address();
  const port = typeof addr === "object" && addr ? addr.port : cfg.port;
  return {
    app,
    port,
    async stop() {
      app.proxy.close();
      await app.fastify.close();
    },
  };
}
