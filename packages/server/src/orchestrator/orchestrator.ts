import { hostname } from "node:os";
import { InvalidRequestError } from "@aenv/edge/errors";
import type { SandboxLogEntry } from "@aenv/protocol";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { EgressSandbox } from "../network/egress-proxy.js";
import type { NetworkSpec } from "../network/policy.js";
import type { SlotAllocator } from "../network/slots.js";
import type { NodePaths } from "../node-paths.js";
import type { SandboxAccess } from "../proxy/proxy.js";
import type { RuntimeDriver } from "../runtime/driver.js";
import type { SandboxRecord, SnapshotRecord, StateStore } from "../state/store.js";
import type { Template, TemplateStore } from "../state/template-catalog.js";
import type { SnapshotRepository } from "../storage/repository/repository.js";
import { timed } from "../telemetry/prometheus.js";
import { accessOf, sandboxByEnvdToken } from "./access.js";
import { type BuildSandbox, startBuildSandbox } from "./build-sandbox.js";
import { ClusterFence } from "./cluster-fence.js";
import { readConsole } from "./console-reader.js";
import { Creator } from "./create.js";
import { drainNode } from "./drain.js";
import { type ForkChild, Forker, type ForkOptions, type ForkOutcome } from "./fork.js";
import { Hibernation } from "./hibernation.js";
import { Killer } from "./kill.js";
import { LifecycleEvents } from "./lifecycle-events.js";
import { Lifetimes } from "./lifetimes.js";
import { guestCpuMs, type MetricSample } from "./metrics.js";
import { MetricsHistory } from "./metrics-history.js";
import type { NodeContext } from "./node-context.js";
import { PauseCommits } from "./pause-commits.js";
import type { ResumeOptions } from "./pause-kinds.js";
import { PauseResume } from "./pause-resume.js";
import type { CreateRequest } from "./records.js";
import { type RecoveryReport, recover } from "./recovery.js";
import { SandboxRegistry } from "./registry.js";
import { Resumer } from "./resumer.js";
import { PausedRetention } from "./retention.js";
import { routeTo } from "./routing.js";
import { SandboxRunner } from "./runner.js";
import type { SandboxLogBook } from "./sandbox-log-book.js";
import { type LogsFilter, mergeLogs } from "./sandbox-logs.js";
import { SandboxNetwork } from "./sandbox-network.js";
import { SandboxStates } from "./sandbox-states.js";
import { Snapshots } from "./snapshots.js";
import { Sources } from "./sources.js";
import { TemplateTrees } from "./template-trees.js";
import { extendTtl, setTtl } from "./ttl.js";
import { type VolumeLookup, volumeUsers } from "./volume-mounts.js";
import { WarmImages } from "./warm-images.js";
import { WarmPool } from "./warm-pool.js";

export type { CreateRequest, ForkChild, ForkOutcome, MetricSample, RecoveryReport };

/**
 * What the server opened for this node (server.ts). The orchestrator builds the registry,
 * runner and states over it and hands its modules one NodeContext; what only one module
 * needs (volumes, template fetches, the log book, the raw store for recovery) stays here.
 */
export interface OrchestratorDeps {
  cfg: ServerConfig;
  paths: NodePaths;
  store: StateStore;
  templates: TemplateStore;
  driver: RuntimeDriver;
  slots: SlotAllocator;
  log: Logger;
  /** The /.aenv folder new sandboxes get (envd and its tools); template build sandboxes too. */
  runtimeDir: string;
  resolvConf: string;
  egressCa?: { certPem: string; fingerprint: string };
  /** Checkpoints restore only on a runtime with this key (driver build, platform, /.aenv). */
  checkpointKey: string;
  /** Where snapshots and paused sandboxes are committed; node-local images are copies. */
  repository: SnapshotRepository;
  /** The node's volumes (storage/volumes/catalog.ts). */
  volumes: VolumeLookup;
  /** Brings a template another server committed to the repository onto this node. */
  fetchTemplate?: (ref: string) => Promise<Template | undefined>;
  /** What the server logged about each sandbox, for its logs API. */
  logBook?: SandboxLogBook;
  /** Brings one template revision's tree from the repository (TemplateSync.fetchTree). */
  fetchTemplateTree?: (id: string, tree: string) => Promise<boolean>;
}

/**
 * Sandbox lifecycle on one node, by job: the registry and runner are the core; create,
 * pause/resume, snapshots, fork, lifetimes, recovery and warm images are modules over them.
 * This class only wires them and is the one entry point the API, proxy and builder use.
 */
export class Orchestrator {
  readonly registry: SandboxRegistry;
  readonly runner: SandboxRunner;
  readonly snapshots: Snapshots;
  readonly warmImages: WarmImages;
  private readonly creator: Creator;
  private readonly pauses: PauseResume;
  /** The repository side of pauses (and, with cluster.p2p, their offers to peers). */
  readonly pauseCommits: PauseCommits;
  private readonly forker: Forker;
  private readonly metricsHistory: MetricsHistory;
  private readonly lifetimes: Lifetimes;
  private readonly retention: PausedRetention;
  private readonly killer: Killer;
  private readonly resumer: Resumer;
  /** What every lifecycle module here works with (node-context.ts). */
  private readonly ctx: NodeContext;
  /** Created, killed, paused, resumed, updated, forked: what clients (webhooks) are told. */
  readonly events = new LifecycleEvents();
  readonly hibernation: Hibernation;
  readonly pool: WarmPool;
  private readonly network: SandboxNetwork;
  private readonly clusterFence: ClusterFence;

  constructor(private readonly d: OrchestratorDeps) {
    const { cfg, log } = d;
    const states = new SandboxStates(d.store);
    const registry = new SandboxRegistry(
      { maxSandboxes: cfg.maxSandboxes, maxMemoryMB: cfg.maxMemoryMB, maxCpus: cfg.maxCpus },
      d.driver.freezer,
    );
    const runner = new SandboxRunner({
      driver: d.driver,
      slots: d.slots,
      states,
      registry,
      paths: d.paths,
      resolvConf: d.resolvConf,
      volumeRoot: (id) => d.volumes.root(id),
      startConcurrency: cfg.startConcurrency,
      ...(d.egressCa ? { egressCa: d.egressCa } : {}),
      log,
    });
    const ctx: NodeContext = {
      cfg,
      paths: d.paths,
      states,
      registry,
      runner,
      driver: d.driver,
      slots: d.slots,
      repository: d.repository,
      templates: d.templates,
      checkpointKey: d.checkpointKey,
      runtimeDir: d.runtimeDir,
      events: this.events,
      log,
    };
    this.ctx = ctx;
    this.registry = registry;
    this.runner = runner;
    this.network = new SandboxNetwork(ctx);
    this.snapshots = new Snapshots(ctx);
    this.warmImages = new WarmImages(ctx);
    const trees = new TemplateTrees({
      paths: d.paths,
      ...(d.fetchTemplateTree ? { fetchTree: d.fetchTemplateTree } : {}),
    });
    const sources = new Sources(ctx, {
      snapshots: this.snapshots,
      trees,
      ...(d.fetchTemplate ? { fetchTemplate: d.fetchTemplate } : {}),
    });
    this.pool = new WarmPool(ctx, { warmImages: this.warmImages });
    this.creator = new Creator(ctx, {
      pool: this.pool,
      sources,
      snapshots: this.snapshots,
      warmImages: this.warmImages,
      volumes: d.volumes,
    });
    this.pauseCommits = new PauseCommits(ctx, { trees });
    this.killer = new Killer(ctx, { commits: this.pauseCommits });
    this.clusterFence = new ClusterFence(ctx, { commits: this.pauseCommits });
    this.pauses = new PauseResume(ctx, { commits: this.pauseCommits });
    this.resumer = new Resumer(ctx, { pauses: this.pauses, commits: this.pauseCommits, fence: this.clusterFence });
    this.hibernation = new Hibernation(ctx, { pauses: this.pauses, guestCpuMs });
    this.forker = new Forker(ctx, { snapshots: this.snapshots, pauses: this.pauses });
    this.metricsHistory = new MetricsHistory(ctx);
    this.onKilled((id) => this.metricsHistory.forget(id));
    this.onKilled((id) => this.hibernation.forget(id));
    this.onKilled((id) => this.d.logBook?.forget(id));
    this.lifetimes = new Lifetimes(ctx, { pauses: this.pauses, killer: this.killer });
    this.retention = new PausedRetention(ctx, { killer: this.killer });
  }

  recover(): Promise<{ report: RecoveryReport; keepSlots: number[] }> {
    return recover(this.ctx, { store: this.d.store, pauseCommits: this.pauseCommits, snapshots: this.snapshots });
  }

  startReaper(): void {
    this.lifetimes.start();
    this.retention.start();
    this.metricsHistory.start();
    this.hibernation.start();
    this.pool.start();
  }

  prepareWarmImages(): Promise<void> {
    return this.warmImages.prepareAll();
  }

  /** A requested disk size over this node's ceiling is refused (400), never silently cut. */
  checkDiskSize(mb: number | undefined): void {
    const max = this.d.cfg.maxDiskSizeMB;
    if (mb !== undefined && max > 0 && mb > max) {
      throw new InvalidRequestError(
        `diskSizeMB ${mb} is over this server's ceiling of ${max} MB (sandbox.max_disk_size_mb)`,
      );
    }
  }

  create(req: CreateRequest): Promise<SandboxRecord> {
    this.checkDiskSize(req.diskSizeMB);
    return timed("create", () => this.creator.create(req));
  }

  get(id: string): SandboxRecord {
    return this.registry.mustGet(id).rec;
  }

  /** Where a sandbox is (this node) and whether it is hibernated, for its listing. */
  placeOf(id: string): { nodeID: string; hibernation?: "frozen" | "saved" } {
    const l = this.registry.get(id);
    const hibernation = l?.hibernated ? "frozen" : l?.rec.pause?.idleSaved ? "saved" : undefined;
    return { nodeID: this.d.cfg.cluster?.nodeId ?? hostname(), ...(hibernation ? { hibernation } : {}) };
  }

  list(): SandboxRecord[] {
    return this.registry.list();
  }

  /** Sandboxes (starting, running or paused) that mount a volume: it cannot be destroyed under them. */
  volumeUsers(volumeId: string): string[] {
    return volumeUsers(
      this.registry.all().map((l) => l.rec),
      volumeId,
    );
  }

  kill(id: string): Promise<void> {
    return this.killer.kill(id);
  }

  /** memory: false keeps only the writable filesystem (a resume boots afresh). */
  pause(id: string, opts: { memory?: boolean } = {}): Promise<void> {
    return timed("pause", () => this.pauses.pause(id, opts));
  }

  /**
   * Resumes a paused sandbox, or extends a running one's TTL; says which. In a cluster, a
   * sandbox paused on another node is taken over from the shared repository first.
   */
  resume(
    id: string,
    timeoutS: number | undefined,
    opts: ResumeOptions = {},
  ): Promise<{ rec: SandboxRecord; resumed: boolean }> {
    return this.resumer.resume(id, timeoutS, opts);
  }

  /** In a cluster: `leaseCurrent` says whether this node's lease is current (cluster-fence.ts). */
  fence(leaseCurrent: () => boolean): void {
    this.clusterFence.leaseCurrent = leaseCurrent;
  }

  /** Reconciliation after a partition (cluster-fence.ts); returns the IDs dropped. */
  supersede(moved: Map<string, string>): Promise<string[]> {
    return this.clusterFence.supersede(moved);
  }

  /**
   * Leaving a cluster: no new work, every running sandbox paused, every pause image committed
   * to the shared repository (any node resumes them on their next use), then local copies go.
   * The caller closes the orchestrator afterwards.
   */
  /** A cluster node's SIGTERM: its sandboxes paused into the repository, for other nodes to resume. */
  drain(): Promise<{ paused: string[]; failed: string[] }> {
    this.registry.close();
    this.lifetimes.stop();
    this.retention.stop();
    return drainNode(this.ctx, { pauses: this.pauses, commits: this.pauseCommits });
  }

  /** A sandbox's ingress settings for the proxy, without resuming or waiting for anything. */
  access(id: string): SandboxAccess | undefined {
    return accessOf(this.registry, id);
  }

  /** The sandbox whose envd token `matches` accepts (the signer of a /files URL), if any. */
  sandboxByEnvdToken(matches: (token: string) => boolean): string | undefined {
    return sandboxByEnvdToken(this.registry, matches);
  }

  /** The sandbox whose slot has this address, for the egress proxy. */
  egressSandbox(slotIp: string): EgressSandbox | undefined {
    return this.network.egressSandbox(slotIp);
  }

  /** Applies every running sandbox's rules to its slot again (after a restart took them over). */
  reapplyNetwork(): Promise<void> {
    return this.network.reapply();
  }

  /** PUT /sandboxes/{id}/network (sandbox-network.ts). */
  updateNetwork(id: string, update: NetworkSpec, allowInternet: boolean | undefined): Promise<void> {
    return this.network.update(id, update, allowInternet);
  }

  setTimeout(id: string, timeoutS: number): void {
    setTtl(this.ctx, id, timeoutS);
    this.events.emit("updated", this.registry.mustGet(id).rec);
  }

  extend(id: string, timeoutS: number | undefined): SandboxRecord {
    return extendTtl(this.ctx, id, timeoutS);
  }

  snapshot(id: string, name: string | undefined): Promise<SnapshotRecord> {
    return timed("snapshot", async () => {
      // Running to its client: one hibernation saved comes back first.
      if (this.registry.get(id)?.rec.pause?.idleSaved) await this.resume(id, undefined);
      return this.snapshots.take(id, name);
    });
  }

  fork(id: string, count: number, timeoutS: number | undefined, opts: ForkOptions = {}): Promise<ForkOutcome> {
    return timed("fork", () => this.forker.fork(id, count, timeoutS, opts));
  }

  /** Samples kept over the sandbox's life within [start, end] (Unix seconds), and one now. */
  metrics(id: string, range: { start?: number; end?: number } = {}): Promise<MetricSample[]> {
    return this.metricsHistory.query(id, range);
  }

  /** The newest sample of each sandbox named that runs here, by ID; others are left out. */
  async latestMetrics(ids: string[]): Promise<Map<string, MetricSample>> {
    const found = await Promise.all(ids.map(async (id) => [id, await this.metricsHistory.latest(id)] as const));
    return new Map(found.flatMap(([id, m]) => (m ? [[id, m] as const] : [])));
  }

  /**
   * Its logs as the logs API asks for them: what the server logged about it and its console,
   * each read only as far as `f` needs (console-reader.ts), merged in time.
   */
  async logs(id: string, f: LogsFilter): Promise<SandboxLogEntry[]> {
    const { rec } = this.registry.mustGet(id);
    const file = this.d.driver.consoleFile?.(this.d.paths.sandboxRun(rec.dir, rec.runtimeId));
    const console = (file ? await readConsole(file, f) : undefined) ?? [];
    return mergeLogs(this.d.logBook?.of(id) ?? [], console, f);
  }

  /** Where the proxy sends traffic (auto-resuming when the sandbox allows it). */
  route(id: string): Promise<{ ip: string }> {
    this.hibernation.touch(id);
    return routeTo(this.registry, this.resumer, id);
  }

  onStopped(fn: (id: string) => void): void {
    this.runner.onStopped(fn);
  }

  /** Called when a sandbox is gone for good (killed, expired with autoPause off). */
  onKilled(fn: (id: string) => void): void {
    this.killer.onKilled(fn);
  }

  buildSandbox(opts: {
    rootfs: string;
    cpuCount: number;
    memoryMB: number;
    mounts: Record<string, string>;
  }): Promise<BuildSandbox> {
    return startBuildSandbox(this.ctx, opts);
  }

  /** Whether sandboxes (running or paused) or snapshots still need a template's trees. */
  templateInUse(templateId: string): boolean {
    return this.registry.all().some((l) => l.rec.templateId === templateId) || this.snapshots.usesTemplate(templateId);
  }

  /**
   * Graceful stop: running sandboxes are killed (they cannot outlive their proxy usefully);
   * paused ones stay on disk and are resumable after the next start.
   */
  async close(): Promise<void> {
    this.registry.close();
    this.pauseCommits.close();
    this.lifetimes.stop();
    this.retention.stop();
    this.metricsHistory.stop();
    this.hibernation.stop();
    await this.pool.close();
    // Pauses answered before their image was written: written first (the runtime holds them).
    await this.pauses.imagesWritten();
    await Promise.all(
      this.registry
        .all()
        .filter((l) => l.rec.state !== "paused")
        .map((l) => this.kill(l.rec.id).catch(() => {})),
    );
    await this.warmImages.close();
    await this.snapshots.close();
    await this.runner.allRemoved();
  }
}
