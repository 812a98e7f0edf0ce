import { createHash } from "node:crypto";
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { isIPv4 } from "node:net";
import { basename, join } from "node:path";
import type { Redis } from "ioredis";
import pino, { type Logger } from "pino";
import { type App, buildApp } from "./api/app.js";
import { NodeAgent } from "./cluster/node-agent.js";
import { describeNode } from "./cluster/node-info.js";
import { E2B_KEY_FORM, type ServerConfig } from "./config.js";
import { EgressCa } from "./network/egress-ca.js";
import { EgressProxy } from "./network/egress-proxy.js";
import { HeaderRewriter } from "./network/egress-rewriter.js";
import { SlotPool } from "./network/slots.js";
import { NodePaths } from "./node-paths.js";
import { Orchestrator, type RecoveryReport } from "./orchestrator/orchestrator.js";
import { SandboxLogBook } from "./orchestrator/sandbox-log-book.js";
import type { RuntimeInfo } from "./runtime/driver.js";
import { prepareEnvdRuntime } from "./runtime/envd-runtime.js";
import { GvisorDriver } from "./runtime/gvisor/driver.js";
import { SecretStore } from "./secrets/store.js";
import { SqliteStateStore } from "./state/sqlite-store.js";
import { TemplateStore } from "./state/template-catalog.js";
import { ImageStore } from "./storage/images/index.js";
import { runGc } from "./storage/repository/chunk-repository.js";
import { openRepository } from "./storage/repository/open.js";
import { VolumeCatalog } from "./storage/volumes/catalog.js";
import { VolumeContent } from "./storage/volumes/content.js";
import { Ext4ImageBackend } from "./storage/volumes/ext4-image.js";
import { LocalDirBackend } from "./storage/volumes/local-dir.js";
import { registerNode } from "./telemetry/prometheus.js";
import { TemplateBuilder } from "./templates/builder.js";
import { ContextFiles } from "./templates/context-files.js";
import { imageProvider } from "./templates/image-provider.js";
import { TemplateSync } from "./templates/sync.js";

/** Nameservers for sandboxes: the host's, minus loopback ones a sandbox cannot reach. */
function writeResolvConf(file: string): { file: string; servers: string[] } {
  let servers: string[] = [];
  try {
    servers = [...readFileSync("/etc/resolv.conf", "utf8").matchAll(/^nameserver\s+(\S+)/gm)]
      .map((m) => m[1] as string)
      .filter((s) => !s.startsWith("127.") && s !== "::1");
  } catch {
    servers = [];
  }
  writeFileSync(file, servers.map((s) => `nameserver ${s}\n`).join("") || "# no reachable host resolver\n");
  return { file, servers };
}

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

export async function startServer(
  cfg: ServerConfig,
  log: Logger = pino({ level: cfg.logLevel }),
  logBook = new SandboxLogBook(),
): Promise<RunningServer> {
  // Only root reads the data dir: it holds tokens, env vars, sandbox memory images.
  mkdirSync(cfg.dataDir, { recursive: true, mode: 0o700 });
  chmodSync(cfg.dataDir, 0o700);
  // Template trees hold images' setuid binaries: host users must not reach them.
  mkdirSync(cfg.templatesDir, { recursive: true, mode: 0o700 });
  chmodSync(cfg.templatesDir, 0o700);
  const paths = new NodePaths(cfg.dataDir, cfg.templatesDir);
  const driver = new GvisorDriver({
    binary: cfg.runscBinary,
    stateDir: paths.runtimeState,
    platform: cfg.platform,
    enforceDiskSize: cfg.enforceDiskSize,
    disksDir: paths.formattedDisks,
    debugLogDir: cfg.runscDebugLog,
    maxConsoleBytes: cfg.maxConsoleBytes,
    log: log.child({ component: "gvisor" }),
  });
  // The probe starts a throwaway sandbox (~0.4 s): the steps up to the orchestrator go on meanwhile.
  const probing = driver.probe();
  // Awaited below; a failure of a step before that must not leave its rejection unhandled.
  probing.catch(() => {});
  const templates = new TemplateStore(cfg.templatesDir);
  if (!templates.get("base")) {
    log.warn({ templatesDir: cfg.templatesDir }, "default template 'base' missing: run scripts/build-base-template.sh");
  }
  if (!E2B_KEY_FORM.test(cfg.apiKey)) {
    log.warn(
      "the API key is not of E2B's form e2b_<hex>: e2b SDK releases that check it need E2B_VALIDATE_API_KEY=false",
    );
  }
  const repository = await openRepository(cfg, log.child({ component: "repository" }));
  // Records hold envd tokens and env vars; SQLite gives its -wal/-shm files the db's mode.
  closeSync(openSync(paths.stateDb, "a", 0o600));
  chmodSync(paths.stateDb, 0o600);
  const store = new SqliteStateStore(paths.stateDb);
  const volumes = new VolumeCatalog(
    paths.volumes,
    (id) => paths.volume(id),
    cfg.volumes.backend === "ext4"
      ? new Ext4ImageBackend((id) => paths.volume(id), cfg.volumes.maxSizeBytes)
      : new LocalDirBackend((id) => paths.volume(id), cfg.volumes.maxSizeBytes),
    log.child({ component: "volumes" }),
  );
  await volumes.load();
  const secrets = new SecretStore(paths.secrets);
  const egressCa = await EgressCa.open(cfg.egress.caDir ?? join(cfg.dataDir, "egress-ca"));
  const slots = new SlotPool(cfg.slotCidr, log.child({ component: "network" }), cfg.warmSlots, cfg.netPrefix);
  const runtimeDir = prepareEnvdRuntime(paths.envdRuntimeRoot);
  const runtime = await probing;
  const sync = cfg.repository.commitTemplates
    ? new TemplateSync({ repository, templates, log: log.child({ component: "templates" }) })
    : undefined;
  const checkpointKey = `${runtime.checkpointKey}-${basename(runtimeDir)}`;
  const resolv = writeResolvConf(paths.resolvConf);
  const orch = new Orchestrator({
    cfg,
    paths,
    store,
    templates,
    driver,
    slots,
    log: log.child({ component: "orchestrator" }),
    runtimeDir,
    resolvConf: resolv.file,
    repository,
    volumes,
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
  });
  const { report: recovery, keepSlots } = await orch.recover();
  // A node that joins a cluster with templates of its own shares them: any node can then start,
  // resume or fork what runs on them (in the background: a tree is hundreds of MiB).
  if (sync && cfg.cluster) {
    void sync.commitMissing().catch((err) => log.warn({ err }, "committing local templates to the repository failed"));
  }
  if (recovery.cleanedUp.length) {
    log.warn({ sandboxes: recovery.cleanedUp }, "sandboxes lost in the previous server run were cleaned up");
  }
  const egress = new EgressProxy({
    log: log.child({ component: "egress" }),
    sandboxFor: (ip) => orch.egressSandbox(ip),
    denied: cfg.egress.deniedRanges,
    slotCidr: cfg.slotCidr,
    hosts: cfg.egress.hosts,
    rewriter: new HeaderRewriter({
      ca: egressCa,
      secret: (name, host) => secrets.use(name, host),
      log: log.child({ component: "egress" }),
      ...(cfg.egress.upstreamCaFile ? { extraUpstreamCa: readFileSync(cfg.egress.upstreamCaFile, "utf8") } : {}),
    }),
  });
  const proxyPorts = await egress.listen();
  await slots.init(keepSlots, {
    denied: cfg.egress.deniedRanges,
    resolvers: resolv.servers.filter((s) => isIPv4(s)),
    proxyPorts,
  });
  // Sandboxes taken over from the previous run get their rules again (the proxy's ports moved).
  await orch.reapplyNetwork();
  orch.startReaper();
  // Chunks no manifest references go, safe against commits in flight (storage/repository/gc.ts).
  const gcTimer =
    cfg.repository.gcIntervalS > 0
      ? setInterval(() => {
          runGc(repository, { graceMs: cfg.repository.gcGraceS * 1000 })
            .then((r) => log.info({ component: "repository", ...r }, "repository garbage collected"))
            .catch((err) => log.warn({ err }, "repository gc failed"));
        }, cfg.repository.gcIntervalS * 1000)
      : undefined;
  gcTimer?.unref();
  const files = new ContextFiles(
    paths.contextFiles,
    createHash("sha256").update(`upload-links\n${cfg.apiKey}`).digest("hex"),
    cfg.images.uploadLimitBytes,
  );
  const builder = new TemplateBuilder({
    templates,
    orch,
    files,
    // Blobs are content-addressed and written atomically: every data dir on the host shares them.
    images: imageProvider(
      new ImageStore({
        dir: paths.imageBlobs,
        insecureRegistries: cfg.images.insecureRegistries,
        allowPrivateRegistries: cfg.images.allowPrivateRegistries,
        fetchTimeoutMs: cfg.images.fetchTimeoutMs,
        maxManifestBytes: cfg.images.maxManifestBytes,
        maxImageBytes: cfg.images.maxImageBytes,
        ...(cfg.images.authFile ? { authFile: cfg.images.authFile } : {}),
        log: (msg) => log.child({ component: "images" }).info(msg),
      }),
    ),
    ...(sync ? { sync } : {}),
    allowHostImageSources: cfg.images.allowHostSources,
    buildTimeoutMs: cfg.images.buildTimeoutMs,
    log: log.child({ component: "builds" }),
  });
  let ready = false;
  let draining = false;
  const c = cfg.cluster;
  const describe = c
    ? () =>
        describeNode(cfg, orch, templates, {
          nodeId: c.nodeId,
          url: c.advertiseUrl,
          version: runtime.version,
          checkpointKey,
          draining,
        })
    : undefined;
  const app = buildApp({
    ...(describe ? { nodes: () => [describe()] } : {}),
    orch,
    templates,
    builder,
    files,
    volumes,
    volumeContent: new VolumeContent(volumes.backend, cfg.volumes.maxSizeBytes),
    secrets,
    log,
    apiKey: cfg.apiKey,
    domain: cfg.domain,
    bodyLimitBytes: cfg.bodyLimitBytes,
    limits: cfg.http,
    health: () => ({
      ready,
      runtime,
      templates: templates.list().map((t) => t.name),
      sandboxes: orch.list().length,
      recovery,
    }),
  });
  registerNode({
    // Build sandboxes (ephemeral) are not users' sandboxes.
    sandboxes: () => orch.registry.all().flatMap((l) => (l.ephemeral ? [] : [l.rec])),
    capacity: cfg.maxSandboxes,
    ready: () => ready,
    draining: () => draining,
    cache: () => repository.metrics(),
  });
  await app.fastify.listen({ host: cfg.host, port: cfg.port });
  const addr = app.fastify.server.address();
  const port = typeof addr === "object" && addr ? addr.port : cfg.port;
  let agent: NodeAgent | undefined;
  let redis: Redis | undefined;
  if (c && describe) {
    // Loaded here: a single node (the common case) never needs the client (~0.1 s to load).
    const { Redis: RedisClient } = await import("ioredis");
    redis = new RedisClient(c.redisUrl, { maxRetriesPerRequest: 2, lazyConnect: true });
    redis.on("error", (err) => log.warn({ err: err.message }, "redis"));
    await redis.connect();
    agent = new NodeAgent({
      redis,
      nodeId: c.nodeId,
      describe,
      owned: () => orch.list().map((r) => r.id),
      log: log.child({ component: "cluster" }),
    });
    // Room freed by a kill or pause is published at once, not at the next beat.
    orch.onKilled((id) => {
      const a = agent;
      if (a)
        void a
          .forget(id)
          .then(() => a.nudge())
          .catch(() => {});
    });
    orch.onStopped(() => agent?.nudge());
    await agent.start();
    log.info({ nodeId: c.nodeId, url: c.advertiseUrl }, "joined the cluster");
  }
  ready = true;
  // Pre-booted template images make creates restores; built in the background.
  const warming = orch.prepareWarmImages().catch((err) => log.error({ err }, "warm images failed"));
  log.info({ host: cfg.host, port, runtime, dataDir: cfg.dataDir, domain: cfg.domain }, "aenv-server ready");
  const running: RunningServer = {
    app,
    orch,
    url: `http://${cfg.host === "0.0.0.0" ? "127.0.0.1" : cfg.host}:${port}`,
    runtime,
    recovery,
    warming,
    async drain() {
      if (!agent) return running.close();
      draining = true;
      await agent.beat().catch(() => {});
      const r = await orch.drain();
      log.info(r, "drained: paused sandboxes resume on other nodes");
      await running.close();
    },
    async close() {
      ready = false;
      await agent?.stop();
      await redis?.quit().catch(() => {});
      if (gcTimer) clearInterval(gcTimer);
      await builder.close();
      await orch.close();
      await volumes.close();
      await warming;
      app.proxy.close();
      await app.fastify.close();
      await slots.close();
      await egress.close();
      await driver.disks?.close();
      store.close();
    },
  };
  return running;
}
