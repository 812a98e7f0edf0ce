import { basename } from "node:path";
import pino, { type Logger } from "pino";
import type { App } from "./api/app.js";
import { startApi } from "./components/api.js";
import { startBuilds } from "./components/builds.js";
import { type ClusterMember, joinCluster } from "./components/cluster.js";
import type { Component } from "./components/component.js";
import { prepareHostDirs, writeResolvConf } from "./components/host-dirs.js";
import { openEgressCa, openSlots, startEgress } from "./components/network.js";
import { describeNode } from "./components/node-info.js";
import { startOrchestrator } from "./components/orchestrator.js";
import { startRepositoryGc } from "./components/repository-gc.js";
import { startRuntime } from "./components/runtime.js";
import { startSecrets } from "./components/secrets.js";
import { openState } from "./components/state.js";
import { openTemplateCatalog, shareLocalTemplates, templateSync } from "./components/templates.js";
import { startTenants } from "./components/tenants.js";
import { openVolumes } from "./components/volumes.js";
import { startWebhooks } from "./components/webhooks.js";
import { E2B_KEY_FORM, type ServerConfig } from "./config.js";
import type { Orchestrator, RecoveryReport } from "./orchestrator/orchestrator.js";
import { SandboxLogBook } from "./orchestrator/sandbox-log-book.js";
import type { RuntimeInfo } from "./runtime/driver.js";
import { prepareEnvdRuntime } from "./runtime/envd-runtime.js";
import { openRepository } from "./storage/repository/open.js";
import { sweepScratch } from "./storage/repository/zstd.js";
import { VolumeContent } from "./storage/volumes/content.js";
import { PathGate } from "./util/path-gate.js";

export interface RunningServer {
  app: App;
  orch: Orchestrator;
  url: string;
  runtime: RuntimeInfo;
  recovery: RecoveryReport;
  warming: Promise<void>;
  close(): Promise<void>;
  /**
   * Cluster nodes stop by draining: no new placements, running sandboxes paused and committed
   * to the shared repository, then the node leaves. A single node just closes.
   */
  drain(): Promise<void>;
}

/** A node: its components started in the order they need each other (components/). */
export async function startServer(
  cfg: ServerConfig,
  log: Logger = pino({ level: cfg.logLevel }),
  logBook = new SandboxLogBook(),
): Promise<RunningServer> {
  // First: it refuses to start beside a running server with the same network names.
  const slots = openSlots(cfg, log);
  const paths = prepareHostDirs(cfg);
  // Sandbox starts hold their template tree's path; a lazy tree settling swaps it (lazy-settle.ts).
  const rootfsGate = new PathGate();
  const runtime = startRuntime(cfg, paths, rootfsGate, log);
  const templates = openTemplateCatalog(cfg, log);
  if (!E2B_KEY_FORM.test(cfg.apiKey)) {
    log.warn(
      "the API key is not of E2B's form e2b_<hex>: e2b SDK releases that check it need E2B_VALIDATE_API_KEY=false",
    );
  }
  const repository = await openRepository(cfg, log.child({ component: "repository" }));
  // Once per server, not per zstd check: the CLI's commands open the repository too.
  void sweepScratch()
    .then((removed) => removed && log.info({ removed }, "zstd scratch folders of gone processes removed"))
    .catch((err) => log.warn({ err }, "zstd scratch sweep failed"));
  const state = openState(paths);
  const volumes = await openVolumes(cfg, paths, log);
  const secretStore = await startSecrets(cfg, paths, log);
  const { secrets } = secretStore;
  const egressCa = await openEgressCa(cfg);
  const runtimeDir = prepareEnvdRuntime(paths.envdRuntimeRoot, { simulated: cfg.runtimeDriver === "sim" });
  const runtimeInfo = await runtime.probing;
  const sync = templateSync(cfg, paths, templates, repository, log);
  const checkpointKey = `${runtimeInfo.checkpointKey}-${basename(runtimeDir)}`;
  const resolv = writeResolvConf(paths.resolvConf);
  const sandboxes = await startOrchestrator(
    {
      cfg,
      paths,
      store: state.store,
      templates,
      driver: runtime.driver,
      slots: slots.slots,
      log: log.child({ component: "orchestrator" }),
      runtimeDir,
      resolvConf: resolv.file,
      repository,
      volumes: volumes.volumes,
      // Checkpoints restore only on the same runtime build and platform and /.aenv contents.
      checkpointKey,
      egressCa,
      logBook,
      ...(sync
        ? {
            fetchTemplate: (ref: string) => sync.fetch(ref),
            fetchTemplateTree: (id: string, tree: string) => sync.fetchTree(id, tree),
          }
        : {}),
    },
    log,
  );
  const { orch, recovery } = sandboxes;
  shareLocalTemplates(cfg, sync, log);
  const hooks = await startWebhooks(cfg, paths, orch, log);
  const keys = await startTenants(cfg, paths, orch, log);
  const egress = await startEgress(
    { cfg, log, orch, secrets, egressCa, slots: slots.slots, resolv },
    sandboxes.keepSlots,
  );
  orch.startReaper();
  const gc = startRepositoryGc(cfg, repository, log);
  const builds = await startBuilds({ cfg, paths, templates, orch, ...(sync ? { sync } : {}), rootfsGate, log });
  let ready = false;
  let draining = false;
  const c = cfg.cluster;
  const describe = c
    ? () =>
        describeNode(cfg, orch, templates, {
          nodeId: c.nodeId,
          url: c.advertiseUrl,
          version: runtimeInfo.version,
          checkpointKey,
          draining,
        })
    : undefined;
  const api = await startApi(
    { cfg, orch, repository, ready: () => ready, draining: () => draining },
    {
      ...(describe ? { nodes: () => [describe()] } : {}),
      orch,
      templates,
      builder: builds.builder,
      onDemand: builds.onDemand,
      peerFiles: {
        ...builds.peerFiles,
        chunk: (sha) => repository.chunkForPeer(sha),
        pause: (id) => orch.pauseCommits.servePeer(id),
      },
      files: builds.files,
      volumes: volumes.volumes,
      volumeContent: new VolumeContent(volumes.volumes.backend, cfg.volumes.maxSizeBytes),
      secrets,
      webhooks: hooks.webhooks,
      log,
      apiKey: cfg.apiKey,
      tenants: keys.tenants,
      ...(keys.keyLimits ? { keyLimits: keys.keyLimits } : {}),
      ...(cfg.cluster ? { clusterNode: true } : {}),
      domain: cfg.domain,
      bodyLimitBytes: cfg.bodyLimitBytes,
      limits: cfg.http,
      health: () => ({
        ready,
        runtime: runtimeInfo,
        templates: templates.list().map((t) => t.name),
        sandboxes: orch.list().length,
        recovery,
      }),
    },
  );
  const cluster: ClusterMember | undefined =
    c && describe ? await joinCluster(c, describe, orch, log, cfg.apiKey) : undefined;
  if (cluster?.peers) await builds.usePeers(cluster.peers, cfg.images.lazy);
  if (cluster?.chunkPeers) repository.usePeers(cluster.chunkPeers);
  if (cluster?.pausePeers) orch.pauseCommits.usePeers(cluster.pausePeers);
  ready = true;
  // Pre-booted template images make creates restores; built in the background.
  const warming = orch.prepareWarmImages().catch((err) => log.error({ err }, "warm images failed"));
  const warmImages: Component = { stop: () => warming };
  log.info(
    { host: cfg.host, port: api.port, runtime: runtimeInfo, dataDir: cfg.dataDir, domain: cfg.domain },
    "aenv-server ready",
  );
  // What takes new work stops first (the cluster's placements, the GC, builds), then the
  // sandboxes, with the API still answering while they go; listeners next, storage last.
  const stopOrder: Array<Component | undefined> = [
    cluster,
    gc,
    builds,
    sandboxes,
    hooks,
    volumes,
    warmImages,
    api,
    keys,
    secretStore,
    slots,
    egress,
    runtime,
    state,
  ];
  const running: RunningServer = {
    app: api.app,
    orch,
    url: `http://${cfg.host === "0.0.0.0" ? "127.0.0.1" : cfg.host}:${api.port}`,
    runtime: runtimeInfo,
    recovery,
    warming,
    async drain() {
      if (!cluster) return running.close();
      draining = true;
      await cluster.beat().catch(() => {});
      const r = await orch.drain();
      log.info(r, "drained: paused sandboxes resume on other nodes");
      await running.close();
    },
    async close() {
      ready = false;
      for (const component of stopOrder) await component?.stop();
    },
  };
  return running;
}
