import { randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { ENVD_PORT } from "@aenv/protocol";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import { ApiError, badRequest, conflict, notFound } from "../errors.js";
import type { Slot, SlotPool } from "../network/slots.js";
import type { RouteResult } from "../proxy/proxy.js";
import type { RuntimeDriver, SandboxLaunch } from "../runtime/driver.js";
import { commitImage, imageBytes, isCompleteImage } from "../runtime/gvisor/image.js";
import type { SandboxRecord, SnapshotRecord, StateStore } from "../state/store.js";
import type { ChunkRepository } from "../storage/repository/chunk-repository.js";
import type { Manifest } from "../storage/repository/repository.js";
import type { Template, TemplateStore } from "../storage/templates.js";
import { envdRequest, waitForEnvd } from "./envd-client.js";
import { envdProcess, type ProcessSpec } from "./envd-process.js";
import { newClientId, newSandboxId, newToken } from "./ids.js";

export interface CreateRequest {
  templateID: string;
  timeoutS?: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  allowInternetAccess?: boolean;
  autoPause?: boolean;
  autoResume?: boolean;
  /** Boot the template's tree instead of restoring its warm image (POST /sandboxes-cold). */
  cold?: boolean;
  cpuCount?: number;
  memoryMB?: number;
  diskSizeMB?: number;
}

export interface SandboxMetric {
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

export interface RecoveryReport {
  /** Running sandboxes that survived the restart and were taken over again. */
  adopted: string[];
  /** Paused sandboxes still resumable. */
  paused: string[];
  /** Sandboxes that were lost (died with or before the server) and were cleaned up. */
  cleanedUp: string[];
  orphanedRuntime: string[];
}

export type ForkResult = { sandbox: SandboxRecord } | { error: { code: number; message: string } };

interface Live {
  rec: SandboxRecord;
  slot?: Slot;
  /** Serialises lifecycle operations on one sandbox. */
  op: Promise<unknown>;
  /** Bumped when a lifecycle operation is queued and when it ends (see sweepDead). */
  opEpoch?: number;
  /** Lifecycle operations queued or running. */
  opsPending?: number;
  /** The pause/resume in flight, joined by identical concurrent calls. */
  inflight?: { kind: "pause" | "resume"; p: Promise<unknown> };
  /** Set while a capture is running: proxied traffic waits for it. */
  gate?: Promise<unknown>;
  /** Internal helper sandbox (template capture or build): never persisted or listed. */
  ephemeral?: boolean;
  /** Template builds: writable rootfs and staging mounts. */
  launchExtras?: Pick<SandboxLaunch, "writableRootfs" | "readOnlyMounts">;
}

/** Where a new sandbox's state comes from. */
type Source = { kind: "boot" } | { kind: "image"; imageDir: string; oldToken?: string };

export interface OrchestratorDeps {
  cfg: ServerConfig;
  store: StateStore;
  templates: TemplateStore;
  driver: RuntimeDriver;
  slots: SlotPool;
  log: Logger;
  runtimeDir: string;
  resolvConf: string;
  /** Identifies images this runtime can restore (driver, version, platform, runtime folder). */
  imageKey: string;
  /**
   * Where snapshots and paused sandboxes are committed (content-addressed, posix_fs or S3);
   * node-local image folders are materialised copies of them.
   */
  repository: ChunkRepository;
  /** Brings a template another server committed to the repository onto this node. */
  fetchTemplate?: (ref: string) => Promise<Template | undefined>;
}

// Generous: idle systrap sandboxes burn CPU, so a busy 2-core node can take a while.
const ENVD_READY_TIMEOUT_MS = 60_000;
/** How long a template's ready command may take to pass (E2B: 10 min). */
const READY_TIMEOUT_MS = 10 * 60_000;

/** A template can start sandboxes once a build has produced its root filesystem. */
export function usable(t: Template): boolean {
  return existsSync(t.rootfs);
}

function templateInit(tpl: Template): Record<string, unknown> {
  return { envVars: tpl.env, defaultUser: tpl.user, defaultWorkdir: tpl.workdir };
}

/** Repository manifest of a paused sandbox: addressable by sandbox ID from any node. */
export const pauseManifestId = (sandboxId: string) => `sbx-${sandboxId}`;

/** Marks a warm image used (pruneWarmImages goes by its age); best effort. */
function touch(dir: string): void {
  try {
    const now = new Date();
    utimesSync(dir, now, now);
  } catch {
    // Read-only or gone: the restore itself will say.
  }
}

/** Warm images are per revision: a tag can start an older build than the current one. */
function warmKey(tpl: Pick<Template, "id" | "revision">): string {
  return `${tpl.id}-r${tpl.revision}`;
}

function runtimeIdFor(sandboxId: string): string {
  return `${sandboxId}-${randomBytes(3).toString("hex")}`;
}
// Restores are CPU-bound: more in parallel than cores only adds contention.
const FORK_PARALLELISM = Math.max(2, availableParallelism());

/** Sandbox lifecycle on one node: create, pause/resume, snapshots, fork, TTL, restarts. */
export class Orchestrator {
  private readonly live = new Map<string, Live>();
  private readonly snapshots = new Map<string, SnapshotRecord>();
  private readonly warm = new Map<string, string>();
  private readonly stoppedListeners: Array<(id: string) => void> = [];
  /** Runtime removals still running in the background, by sandbox ID. */
  private readonly cleanups = new Map<string, Promise<void>>();
  /** Commits of snapshots to the repository still running, by snapshot ID. */
  private readonly snapshotCommits = new Map<string, Promise<void>>();
  /** Pause images waiting to be committed (see commitPause), by sandbox ID. */
  private readonly pauseTimers = new Map<string, NodeJS.Timeout>();
  /** Commits of pause images to the repository still running, by sandbox ID. */
  private readonly pauseCommits = new Map<string, Promise<void>>();
  private reaper: NodeJS.Timeout | undefined;
  private deadCheck: NodeJS.Timeout | undefined;
  private closing = false;

  constructor(private readonly d: OrchestratorDeps) {}

  private get dataDir(): string {
    return this.d.cfg.dataDir;
  }

  // ---------------------------------------------------------------- restart recovery

  /**
   * After a restart: running sandboxes whose runsc sandbox and network slot survived are
   * taken over again; paused ones stay resumable; everything else is cleaned up.
   * Returns the slots to keep when the network pool is reset.
   */
  async recover(): Promise<{ report: RecoveryReport; keepSlots: number[] }> {
    const report: RecoveryReport = { adopted: [], paused: [], cleanedUp: [], orphanedRuntime: [] };
    const keepSlots: number[] = [];
    const running = new Set(await this.d.driver.list({ runningOnly: true }));
    const known = new Set<string>();
    for (const rec of this.d.store.all()) {
      known.add(rec.id);
      const finalImage = join(rec.dir, "image");
      const committed =
        rec.state === "paused"
          ? await this.d.repository.get(pauseManifestId(rec.id)).catch(() => undefined)
          : undefined;
      if (rec.state === "paused" && (isCompleteImage(rec.imageDir) || committed)) {
        // A lost local image is rebuilt from the repository on resume.
        rec.imageDir ??= finalImage;
        this.live.set(rec.id, { rec, op: Promise.resolve() });
        report.paused.push(rec.id);
        if (committed) this.d.repository.pinManifest(committed);
        else this.commitPause(rec, rec.imageDir);
        continue;
      }
      const slot =
        rec.state === "running" &&
        running.has(rec.runtimeId) &&
        rec.slotIndex !== null &&
        this.d.slots.exists(rec.slotIndex)
          ? this.d.slots.describe(rec.slotIndex)
          : undefined;
      if (slot && (await this.answers(slot.slotIp))) {
        this.live.set(rec.id, { rec, slot, op: Promise.resolve() });
        keepSlots.push(slot.index);
        report.adopted.push(rec.id);
        this.d.log.info({ sandboxID: rec.id }, "running sandbox adopted after restart");
        continue;
      }
      if (rec.state === "running" && isCompleteImage(finalImage)) {
        // Died between committing its pause image and recording it: it is paused.
        await this.d.driver.destroy(rec.runtimeId);
        rec.state = "paused";
        rec.imageDir = finalImage;
        rec.ttlLeftMs = Math.max(0, rec.endAt - Date.now());
        rec.slotIndex = null;
        this.d.store.put(rec);
        this.live.set(rec.id, { rec, op: Promise.resolve() });
        report.paused.push(rec.id);
        continue;
      }
      this.d.log.warn(
        { sandboxID: rec.id, state: rec.state },
        "sandbox did not survive the server restart; cleaning up",
      );
      await this.d.driver.destroy(rec.runtimeId);
      rmSync(rec.dir, { recursive: true, force: true });
      this.d.store.delete(rec.id);
      report.cleanedUp.push(rec.id);
    }
    const liveRuntime = new Set(
      [...this.live.values()].filter((l) => l.rec.state === "running").map((l) => l.rec.runtimeId),
    );
    for (const id of await this.d.driver.list()) {
      if (liveRuntime.has(id)) continue;
      if (!known.has(id.slice(0, 21))) report.orphanedRuntime.push(id);
      this.d.log.warn({ sandboxID: id }, "runtime sandbox without a live record; destroying");
      await this.d.driver.destroy(id);
    }
    // Sandbox folders nobody owns, and transient fork captures, go.
    const sdir = join(this.dataDir, "sandboxes");
    if (existsSync(sdir)) {
      for (const name of readdirSync(sdir))
        if (!this.live.has(name)) rmSync(join(sdir, name), { recursive: true, force: true });
    }
    rmSync(join(this.dataDir, "forks"), { recursive: true, force: true });
    // Snapshots are what the repository holds (a manifest is written last, so every listed
    // one is complete); local copies are only a cache and are rebuilt on demand.
    for (const m of await this.d.repository.list()) {
      const rec = this.snapshotOfManifest(m);
      if (rec) this.snapshots.set(m.id, rec);
    }
    const snapDir = join(this.dataDir, "snapshots");
    // Snapshots taken here whose commit had not finished: committed again now.
    const pending: SnapshotRecord[] = [];
    if (existsSync(snapDir)) {
      for (const name of readdirSync(snapDir)) {
        const id = name.replace(/\.pending\.json$/, "");
        if (id === name || this.snapshots.has(id) || !isCompleteImage(join(snapDir, id))) continue;
        try {
          const rec = JSON.parse(readFileSync(join(snapDir, name), "utf8")) as SnapshotRecord;
          if (rec.id !== id) continue;
          const local = { ...rec, imageDir: join(snapDir, id) };
          this.snapshots.set(id, local);
          pending.push(local);
        } catch {
          // an unreadable record: the image is dropped below
        }
      }
      for (const name of readdirSync(snapDir)) {
        const id = name.replace(/\.pending\.json$/, "");
        if (!this.snapshots.has(id)) rmSync(join(snapDir, name), { recursive: true, force: true });
      }
    }
    for (const rec of pending) this.commitSnapshot(rec);
    return { report, keepSlots };
  }

  private async answers(ip: string): Promise<boolean> {
    try {
      return (await envdRequest(ip, "GET", "/health", { timeoutMs: 2000 })).status === 204;
    } catch {
      return false;
    }
  }

  // ---------------------------------------------------------------- warm templates

  /**
   * Gives every template a pre-booted image (envd running), so creating from it is a
   * restore rather than a boot. Images are per runtime key; missing ones are built here.
   */
  async prepareWarmImages(): Promise<void> {
    try {
      this.pruneWarmImages();
    } catch (err) {
      this.d.log.warn({ err }, "could not prune warm images");
    }
    for (const tpl of this.d.templates.list()) {
      if (this.closing) return;
      if (!usable(tpl) || !tpl.warm) continue;
      try {
        await this.warmTemplate(tpl);
      } catch (err) {
        this.d.log.warn({ err, template: tpl.id }, "could not build a warm image; template will cold-boot");
      }
    }
  }

  /**
   * Warm images of other runtime builds (an upgraded aenv, another platform) never restore
   * here: one unused for `runtime.stale_warm_image_secs` is removed (a server still using it
   * takes it again), as are captures a crash left half-written. Creates touch the image they
   * restore, so its age is the time since it was last used.
   */
  pruneWarmImages(): void {
    const dir = join(this.d.cfg.templatesDir, ".warm");
    if (!existsSync(dir)) return;
    const now = Date.now();
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      const st = statSync(p, { throwIfNoEntry: false });
      if (!st?.isDirectory()) continue;
      const idleS = (now - st.mtimeMs) / 1000;
      const partial = /\.tmp-\d+$/.test(name);
      const stale = partial
        ? idleS > 3600
        : !name.endsWith(`-${this.d.imageKey}`) && idleS > this.d.cfg.staleWarmImageS;
      if (!stale) continue;
      rmSync(p, { recursive: true, force: true });
      this.d.log.info({ image: name, idleS: Math.round(idleS) }, "stale warm image removed");
    }
  }

  private warmDir(tpl: Template): string {
    // Beside the templates, so every data dir on the host shares them.
    return join(this.d.cfg.templatesDir, ".warm", `${warmKey(tpl)}-${this.d.imageKey}`);
  }

  /**
   * Makes sure a template has a warm image for this runtime: booted, its start command
   * running and its ready command passing, captured. Creating from it is then a restore.
   */
  async warmTemplate(tpl: Template, onLog?: (line: string) => void): Promise<void> {
    const dir = this.warmDir(tpl);
    if (isCompleteImage(dir)) {
      this.warm.set(warmKey(tpl), dir);
      return;
    }
    const t0 = Date.now();
    try {
      await this.captureTemplate(tpl, dir, onLog);
    } catch (err) {
      // Another server on this host may have committed the same image meanwhile.
      if (!isCompleteImage(dir)) throw err;
    }
    this.warm.set(warmKey(tpl), dir);
    this.d.log.info({ template: tpl.id, ms: Date.now() - t0 }, "template warm image ready");
  }

  private readonly warming = new Map<string, Promise<void>>();

  private warmInBackground(tpl: Template): void {
    const key = warmKey(tpl);
    if (this.warming.has(key)) return;
    const p = this.warmTemplate(tpl)
      .catch((err) => this.d.log.warn({ err, template: tpl.id }, "could not take a warm image"))
      .finally(() => this.warming.delete(key));
    this.warming.set(key, p);
  }

  private async fetchTemplate(ref: string): Promise<Template | undefined> {
    if (!this.d.fetchTemplate) return undefined;
    try {
      return await this.d.fetchTemplate(ref);
    } catch (err) {
      throw new ApiError(500, `template '${ref}' could not be fetched from the repository: ${(err as Error).message}`);
    }
  }

  /** Starts the template's start command in the background and waits for its ready command. */
  private async startTemplateCmd(ip: string, tpl: Template, token: string | undefined, onLog?: (line: string) => void) {
    if (!tpl.startCmd) return;
    const sh = (cmd: string): ProcessSpec => ({
      cmd: "/bin/sh",
      args: ["-c", cmd],
      envs: tpl.env,
      cwd: tpl.workdir,
      user: tpl.user,
      token,
    });
    onLog?.(`start command: ${tpl.startCmd}`);
    await envdProcess(ip, sh(tpl.startCmd), { detach: true });
    // E2B's default when only a start command is given.
    const ready = tpl.readyCmd ?? "sleep 20";
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (let attempt = 1; ; attempt++) {
      const r = await envdProcess(ip, { ...sh(ready), timeoutMs: 30_000 });
      if (r.exitCode === 0) {
        onLog?.(`ready command passed (attempt ${attempt})`);
        return;
      }
      if (Date.now() > deadline) throw new Error(`ready command did not pass within ${READY_TIMEOUT_MS / 1000} s`);
      await new Promise((res) => setTimeout(res, attempt < 10 ? 200 : 2000));
    }
  }

  private async captureTemplate(tpl: Template, finalDir: string, onLog?: (line: string) => void): Promise<void> {
    const id = newSandboxId();
    const dir = join(this.dataDir, "sandboxes", id);
    const rec = this.newRecord(id, dir, tpl.id, tpl.name, tpl.rootfs, { templateID: tpl.id }, tpl);
    const live: Live = { rec, op: Promise.resolve(), ephemeral: true };
    try {
      // No token: the create that restores this image sets one.
      await this.bring(live, { kind: "boot" }, templateInit(tpl));
      if (live.slot) await this.startTemplateCmd(live.slot.slotIp, tpl, undefined, onLog);
      // Run a login shell once so the image holds bash and its libraries in the sentry's
      // page cache: the first command after every restore is then as fast as later ones.
      if (live.slot) {
        await envdProcess(live.slot.slotIp, { cmd: "/bin/bash", args: ["-l", "-c", "true"], timeoutMs: 30_000 }).catch(
          () => undefined,
        );
      }
      const tmp = `${finalDir}.tmp-${process.pid}`;
      mkdirSync(join(finalDir, ".."), { recursive: true });
      rmSync(tmp, { recursive: true, force: true });
      mkdirSync(tmp, { recursive: true });
      await this.quiesce(live, undefined);
      await this.d.driver.checkpoint(rec.runtimeId, tmp, { leaveRunning: false });
      commitImage(tmp, finalDir);
    } finally {
      await this.teardown(live, false);
    }
  }

  /**
   * A throwaway sandbox whose writes go straight to `rootfs`, for template build steps.
   * envd runs as usual; the caller runs the steps and must call close().
   */
  async buildSandbox(opts: {
    rootfs: string;
    cpuCount: number;
    memoryMB: number;
    mounts: Record<string, string>;
  }): Promise<{ ip: string; close(): Promise<void> }> {
    if (this.closing) throw new ApiError(503, "server is shutting down");
    const id = newSandboxId();
    const sizing = { cpuCount: opts.cpuCount, memoryMB: opts.memoryMB, diskSizeMB: 0 };
    const rec = this.newRecord(
      id,
      join(this.dataDir, "sandboxes", id),
      "build",
      "build",
      opts.rootfs,
      { templateID: "build" },
      sizing,
    );
    const live: Live = {
      rec,
      op: Promise.resolve(),
      ephemeral: true,
      launchExtras: { writableRootfs: true, readOnlyMounts: opts.mounts },
    };
    try {
      await this.bring(live, { kind: "boot" }, { defaultUser: "root", defaultWorkdir: "/" });
    } catch (err) {
      await this.teardown(live, false);
      await this.cleanups.get(rec.runtimeId);
      throw err;
    }
    const ip = live.slot?.slotIp as string;
    return {
      ip,
      close: async () => {
        const runtimeId = rec.runtimeId;
        await this.teardown(live, false);
        // The rootfs is used next as a template: the sandbox must be fully gone first.
        await this.cleanups.get(runtimeId);
      },
    };
  }

  // ---------------------------------------------------------------- TTL

  startReaper(): void {
    this.reaper = setInterval(() => void this.reap(), 1000);
    this.reaper.unref();
    const every = this.d.cfg.deadCheckIntervalS;
    if (every > 0) {
      this.deadCheck = setInterval(() => {
        this.sweepDead().catch((err) => this.d.log.warn({ err }, "could not check for dead sandboxes"));
      }, every * 1000);
      this.deadCheck.unref();
    }
  }

  private async reap(): Promise<void> {
    const now = Date.now();
    for (const l of this.live.values()) {
      if (l.rec.state !== "running" || l.rec.endAt > now || l.inflight || l.gate) continue;
      const id = l.rec.id;
      if (l.rec.autoPause) {
        this.d.log.info({ sandboxID: id }, "sandbox TTL expired; pausing");
        this.pause(id).catch((err) => this.d.log.error({ err, sandboxID: id }, "TTL pause failed"));
      } else {
        this.d.log.info({ sandboxID: id }, "sandbox TTL expired; killing");
        this.kill(id).catch((err) => this.d.log.error({ err, sandboxID: id }, "TTL kill failed"));
      }
    }
  }

  /** Sandboxes that died on their own (OOM kill, crash) are noticed and cleaned up. */
  private async sweepDead(): Promise<void> {
    const idle = (l: Live) => l.rec.state === "running" && !l.gate && !l.inflight && !l.opsPending;
    const running = [...this.live.values()].filter(idle);
    if (!running.length) return;
    // Any operation that started or ended while runsc listed (a pause and resume, a snapshot
    // whose checkpoint the list caught) makes the list stale for that sandbox: never kill on it.
    const seen = new Map(running.map((l) => [l, `${l.rec.runtimeId}/${l.opEpoch ?? 0}`]));
    // runsc list can also wait on a restore in progress and leave containers out: a sandbox
    // missing from it is asked about on its own before it is taken for dead.
    const unchanged = (l: Live) => `${l.rec.runtimeId}/${l.opEpoch ?? 0}` === seen.get(l) && idle(l);
    const alive = new Set(await this.d.driver.list({ runningOnly: true }));
    for (const l of running) {
      if (!unchanged(l) || alive.has(l.rec.runtimeId)) continue;
      if ((await this.d.driver.isRunning(l.rec.runtimeId)) || !unchanged(l)) continue;
      this.d.log.warn({ sandboxID: l.rec.id }, "sandbox stopped on its own (out of memory or crashed); removing it");
      this.kill(l.rec.id).catch(() => {});
    }
  }

  private clampTimeout(s: number | undefined): number {
    const t = s ?? this.d.cfg.defaultTimeoutS;
    if (!Number.isFinite(t) || t < 0) throw badRequest("timeout must be a non-negative number of seconds");
    return Math.min(t, this.d.cfg.maxTimeoutS);
  }

  // ---------------------------------------------------------------- create

  private newRecord(
    id: string,
    dir: string,
    templateId: string,
    alias: string,
    rootfs: string,
    req: CreateRequest,
    sizing: { cpuCount: number; memoryMB: number; diskSizeMB: number },
  ): SandboxRecord {
    const now = Date.now();
    return {
      id,
      templateId,
      alias,
      clientId: newClientId(),
      envdToken: newToken(),
      startedAt: now,
      endAt: now + this.clampTimeout(req.timeoutS) * 1000,
      state: "creating",
      cpuCount: sizing.cpuCount,
      memoryMB: sizing.memoryMB,
      diskSizeMB: sizing.diskSizeMB,
      metadata: req.metadata ?? {},
      envVars: req.envVars ?? {},
      allowInternet: req.allowInternetAccess ?? true,
      // TTL expiry pauses unless the client asked for kill (autoPause: false).
      autoPause: req.autoPause ?? true,
      autoResume: req.autoResume ?? false,
      slotIndex: null,
      dir,
      runtimeId: runtimeIdFor(id),
      rootfs,
      runtimeDir: this.d.runtimeDir,
    };
  }

  /** Admission: running and starting sandboxes count against the node's capacity. */
  private admit(): void {
    let n = 0;
    for (const l of this.live.values()) if (l.rec.state === "running" || l.rec.state === "creating") n++;
    if (n >= this.d.cfg.maxSandboxes) {
      throw new ApiError(429, `node is at capacity (${this.d.cfg.maxSandboxes} sandboxes); kill or pause some first`);
    }
  }

  findSnapshot(ref: string): SnapshotRecord | undefined {
    return this.snapshots.get(ref) ?? [...this.snapshots.values()].find((s) => s.names.includes(ref));
  }

  async create(req: CreateRequest): Promise<SandboxRecord> {
    if (this.closing) throw new ApiError(503, "server is shutting down");
    this.admit();
    const timeoutS = this.clampTimeout(req.timeoutS);
    const id = newSandboxId();
    const dir = join(this.dataDir, "sandboxes", id);
    const localTpl = this.d.templates.get(req.templateID);
    const snap =
      (await this.stillCommitted(this.findSnapshot(req.templateID))) ??
      (localTpl ? undefined : await this.findRemoteSnapshot(req.templateID));
    let rec: SandboxRecord;
    let source: Source;
    let envVars: Record<string, string>;
    let tpl: Template | undefined;
    if (snap) {
      if (snap.imageKey && snap.imageKey !== this.d.imageKey) {
        throw badRequest(
          `snapshot '${snap.id}' was taken on another runtime (${snap.imageKey}, here ${this.d.imageKey})`,
        );
      }
      if (!existsSync(snap.rootfs)) {
        throw new ApiError(500, `snapshot '${snap.id}' needs the template tree ${snap.rootfs}, not on this node`);
      }
      await this.materialize(snap);
      rec = this.newRecord(id, dir, snap.id, snap.names[0] ?? snap.id, snap.rootfs, req, snap);
      // Same runtime key means the same /.aenv contents: use this node's copy of them.
      rec.runtimeDir = snap.imageKey ? this.d.runtimeDir : snap.runtimeDir;
      envVars = { ...snap.envVars, ...req.envVars };
      rec.envVars = envVars;
      source = {
        kind: "image",
        imageDir: snap.imageDir,
        oldToken: snap.envdToken,
      };
    } else {
      tpl = localTpl ?? (await this.fetchTemplate(req.templateID));
      if (!tpl) throw notFound(`template '${req.templateID}' not found`);
      if (!usable(tpl)) throw badRequest(`template '${req.templateID}' has no finished build yet (${tpl.buildStatus})`);
      const sizing = {
        cpuCount: req.cpuCount ?? tpl.cpuCount,
        memoryMB: req.memoryMB ?? tpl.memoryMB,
        diskSizeMB: req.diskSizeMB ?? tpl.diskSizeMB,
      };
      rec = this.newRecord(id, dir, tpl.id, tpl.name, tpl.rootfs, req, sizing);
      envVars = { ...tpl.env, ...rec.envVars };
      const warm = this.warm.get(warmKey(tpl));
      // A warm image carries the template's sizing: other sizes boot.
      const warmFits = sizing.cpuCount === tpl.cpuCount && sizing.memoryMB === tpl.memoryMB;
      source =
        !req.cold && warmFits && warm && isCompleteImage(warm) ? { kind: "image", imageDir: warm } : { kind: "boot" };
      if (source.kind === "image") touch(source.imageDir);
    }
    const live: Live = { rec, op: Promise.resolve() };
    this.live.set(id, live);
    const t0 = Date.now();
    const init = {
      accessToken: rec.envdToken,
      envVars,
      ...(tpl ? { defaultUser: tpl.user, defaultWorkdir: tpl.workdir } : {}),
    };
    try {
      try {
        await this.bring(live, source, init);
      } catch (err) {
        if (source.kind !== "image" || !tpl) throw err;
        // A stale warm image must not make the template unusable: boot instead.
        this.d.log.warn({ err, template: tpl.id }, "warm restore failed; cold-booting");
        this.warm.delete(warmKey(tpl));
        await this.teardownRuntime(live);
        source = { kind: "boot" };
        await this.bring(live, source, init);
      }
      // A cold boot has to start what a warm image already runs.
      if (source.kind === "boot" && tpl?.startCmd && live.slot) {
        await this.startTemplateCmd(live.slot.slotIp, tpl, rec.envdToken);
      }
      rec.state = "running";
      rec.endAt = Date.now() + timeoutS * 1000;
      this.d.store.put(rec);
      this.d.log.info(
        { sandboxID: id, template: rec.templateId, from: source.kind, ms: Date.now() - t0 },
        "sandbox created",
      );
      // The next create from this template should be a restore.
      if (tpl?.warm && source.kind === "boot" && !req.cold && !this.closing) this.warmInBackground(tpl);
      return rec;
    } catch (err) {
      this.d.log.error({ err, sandboxID: id }, "sandbox create failed");
      await this.teardown(live, true);
      if (err instanceof ApiError) throw err;
      throw new ApiError(500, `failed to start sandbox: ${(err as Error).message}`);
    }
  }

  private launch(live: Live, slot: Slot): SandboxLaunch {
    const { rec } = live;
    return {
      ...live.launchExtras,
      id: rec.runtimeId,
      rootfs: rec.rootfs,
      dir: join(rec.dir, rec.runtimeId),
      netnsPath: slot.netnsPath,
      cpuCount: rec.cpuCount,
      memoryMB: rec.memoryMB,
      hostname: "aenv",
      runtimeDir: rec.runtimeDir,
      resolvConf: this.d.resolvConf,
    };
  }

  /**
   * Gets a sandbox running in a fresh slot, booted or restored, and waits for envd. With an
   * init body, envd is (re)initialised: new token, env, user (the old token authorises it).
   */
  private async bring(live: Live, source: Source, init: Record<string, unknown> | undefined): Promise<void> {
    const { rec } = live;
    // Each start is a new runtime sandbox: the previous one may still be being removed.
    rec.runtimeId = runtimeIdFor(rec.id);
    mkdirSync(rec.dir, { recursive: true });
    live.slot = await this.d.slots.acquire({ allowInternet: rec.allowInternet });
    rec.slotIndex = live.slot.index;
    if (!live.ephemeral) this.d.store.put(rec);
    const launch = this.launch(live, live.slot);
    if (source.kind === "boot") await this.d.driver.start(launch);
    else await this.d.driver.restore(launch, source.imageDir);
    const ip = live.slot.slotIp;
    await waitForEnvd(ip, ENVD_READY_TIMEOUT_MS, () => this.d.driver.isRunning(rec.runtimeId));
    if (init) {
      const oldToken = source.kind === "image" ? source.oldToken : undefined;
      const r = await envdRequest(ip, "POST", "/init", {
        body: { ...init, timestamp: new Date().toISOString() },
        token: oldToken,
      });
      if (r.status >= 300) throw new Error(`envd /init answered ${r.status}: ${r.body}`);
    }
  }

  /**
   * Stops the runtime sandbox now; removing it (runsc delete, slot reset, optionally its
   * folder) finishes in the background, tracked so a resume or shutdown waits for it.
   */
  private async teardownRuntime(live: Live, removeDir = false): Promise<void> {
    const id = live.rec.runtimeId;
    const slot = live.slot;
    const dir = removeDir ? live.rec.dir : join(live.rec.dir, id);
    for (const fn of this.stoppedListeners) fn(live.rec.id);
    live.slot = undefined;
    live.rec.slotIndex = null;
    await this.d.driver.stop(id).catch(() => {});
    const prev = this.cleanups.get(id) ?? Promise.resolve();
    const done = prev
      .then(() => this.d.driver.destroy(id))
      .catch((err) => this.d.log.warn({ err, sandboxID: id }, "runtime removal failed"))
      .then(async () => {
        if (slot) await this.d.slots.release(slot).catch(() => {});
        rmSync(dir, { recursive: true, force: true });
      })
      .finally(() => {
        if (this.cleanups.get(id) === done) this.cleanups.delete(id);
      });
    this.cleanups.set(id, done);
  }

  private async teardown(live: Live, removeRecord: boolean): Promise<void> {
    await this.teardownRuntime(live, true);
    if (removeRecord && !live.ephemeral) {
      this.d.store.delete(live.rec.id);
      this.live.delete(live.rec.id);
    }
  }

  /** Called whenever a sandbox stops running or is captured (the proxy drops its connections). */
  onStopped(fn: (id: string) => void): void {
    this.stoppedListeners.push(fn);
  }

  // ---------------------------------------------------------------- queries

  private mustGet(id: string): Live {
    const l = this.live.get(id);
    if (!l || l.rec.state === "killing" || l.rec.state === "creating") throw notFound(`sandbox '${id}' not found`);
    return l;
  }

  get(id: string): SandboxRecord {
    return this.mustGet(id).rec;
  }

  list(): SandboxRecord[] {
    return [...this.live.values()].map((l) => l.rec).filter((r) => r.state === "running" || r.state === "paused");
  }

  /**
   * Where the proxy sends traffic: waits out captures and resumes in flight, resumes a
   * paused sandbox when its autoResume is on.
   */
  async resolveRoute(id: string, port: number): Promise<RouteResult> {
    for (let attempt = 0; attempt < 3; attempt++) {
      const l = this.live.get(id);
      if (!l || l.rec.state === "killing" || l.rec.state === "creating") {
        return { status: 502, message: `sandbox '${id}' not found or not running` };
      }
      if (l.gate) {
        await l.gate.catch(() => {});
        continue;
      }
      if (l.inflight) {
        await l.inflight.p.catch(() => {});
        continue;
      }
      if (l.rec.state === "paused") {
        if (!l.rec.autoResume) {
          return {
            status: port === ENVD_PORT ? 502 : 410,
            message: `sandbox '${id}' is paused; resume it (connect) or create it with autoResume`,
          };
        }
        try {
          await this.resume(id, undefined);
        } catch (err) {
          return { status: 502, message: `auto-resume of sandbox '${id}' failed: ${(err as Error).message}` };
        }
        continue;
      }
      if (l.slot) return { ip: l.slot.slotIp };
    }
    return { status: 502, message: `sandbox '${id}' is not reachable` };
  }

  // ---------------------------------------------------------------- operations

  private serialize<T>(l: Live, fn: () => Promise<T>): Promise<T> {
    l.opEpoch = (l.opEpoch ?? 0) + 1;
    l.opsPending = (l.opsPending ?? 0) + 1;
    const p = l.op.then(fn, fn);
    l.op = p
      .catch(() => {})
      .finally(() => {
        l.opEpoch = (l.opEpoch ?? 0) + 1;
        l.opsPending = (l.opsPending ?? 1) - 1;
      });
    return p;
  }

  /** Identical concurrent calls share the operation in flight. */
  private joinOrRun<T>(l: Live, kind: "pause" | "resume", fn: () => Promise<T>): Promise<T> {
    if (l.inflight?.kind === kind) return l.inflight.p as Promise<T>;
    const p = this.serialize(l, fn);
    const entry = { kind, p };
    l.inflight = entry;
    const clear = () => {
      if (l.inflight === entry) l.inflight = undefined;
    };
    p.then(clear, clear);
    return p;
  }

  async kill(id: string): Promise<void> {
    const l = this.live.get(id);
    if (!l || l.rec.state === "killing" || l.rec.state === "creating") throw notFound(`sandbox '${id}' not found`);
    await this.serialize(l, async () => {
      if (!this.live.has(id)) return;
      const wasPaused = l.rec.state === "paused";
      l.rec.state = "killing";
      await this.teardown(l, true);
      if (wasPaused) this.dropPause(id);
      this.d.log.info({ sandboxID: id }, "sandbox killed");
    });
  }

  /** Sets the TTL to now + timeout (may shorten). */
  setTimeout(id: string, timeoutS: number): void {
    const l = this.mustGet(id);
    const t = this.clampTimeout(timeoutS);
    if (l.rec.state === "paused") l.rec.ttlLeftMs = t * 1000;
    else l.rec.endAt = Date.now() + t * 1000;
    this.d.store.put(l.rec);
  }

  /** Extends a running sandbox's TTL to at least now + timeout; never shortens. */
  extend(id: string, timeoutS: number | undefined): SandboxRecord {
    const l = this.mustGet(id);
    if (l.rec.state === "paused") throw conflict(`sandbox '${id}' is paused`);
    const t = this.clampTimeout(timeoutS);
    l.rec.endAt = Math.max(l.rec.endAt, Date.now() + t * 1000);
    this.d.store.put(l.rec);
    return l.rec;
  }

  /**
   * Closes every connection into the sandbox before a capture: runsc drops external TCP
   * endpoints at checkpoint, and an application socket restored that way makes epoll spin.
   */
  private async quiesce(l: Live, token: string | undefined): Promise<void> {
    for (const fn of this.stoppedListeners) fn(l.rec.id);
    if (!l.slot) return;
    const r = await envdRequest(l.slot.slotIp, "POST", "/quiesce", { token, timeoutMs: 5000 }).catch(() => undefined);
    if (r && r.status >= 300) this.d.log.warn({ sandboxID: l.rec.id, status: r.status }, "envd quiesce refused");
    // Let envd's side of the closed connections settle before the capture.
    await new Promise((res) => setTimeout(res, 20));
  }

  /** Checkpoints a running sandbox that keeps running; traffic waits at the gate meanwhile. */
  private async capture(l: Live, imageDir: string): Promise<void> {
    let open!: () => void;
    l.gate = new Promise<void>((res) => (open = res));
    try {
      await this.quiesce(l, l.rec.envdToken);
      rmSync(imageDir, { recursive: true, force: true });
      mkdirSync(imageDir, { recursive: true });
      await this.d.driver.checkpoint(l.rec.runtimeId, imageDir, { leaveRunning: true });
    } finally {
      l.gate = undefined;
      open();
    }
  }

  /**
   * Pause = capture (memory, processes, writable layer), commit the image durably, then
   * stop the sandbox and free its slot. Until the commit the sandbox still runs, so a crash
   * at any point leaves it either running or paused.
   */
  pause(id: string): Promise<void> {
    const l = this.mustGet(id);
    if (l.rec.state === "paused" && !l.inflight) return Promise.reject(conflict(`sandbox '${id}' is already paused`));
    return this.joinOrRun(l, "pause", async () => {
      if (!this.live.has(id) || l.rec.state === "killing") throw notFound(`sandbox '${id}' not found`);
      if (l.rec.state === "paused") throw conflict(`sandbox '${id}' is already paused`);
      const t0 = Date.now();
      const final = join(l.rec.dir, "image");
      const tmp = `${final}.tmp`;
      let gateOpen!: () => void;
      const gate = new Promise<void>((res) => (gateOpen = res));
      try {
        await this.capture(l, tmp);
        // Traffic arriving from here on must see the sandbox paused, not half-stopped.
        l.gate = gate;
        commitImage(tmp, final);
        l.rec.ttlLeftMs = Math.max(0, l.rec.endAt - Date.now());
        await this.teardownRuntime(l);
        l.rec.state = "paused";
        l.rec.imageDir = final;
        this.d.store.put(l.rec);
      } finally {
        if (l.gate === gate) l.gate = undefined;
        gateOpen();
        rmSync(tmp, { recursive: true, force: true });
      }
      this.d.log.info({ sandboxID: id, ms: Date.now() - t0, bytes: imageBytes(final) }, "sandbox paused");
      this.commitPause(l.rec, final);
    });
  }

  /**
   * A paused sandbox is committed to the repository too, in the background (the local image
   * is already durable, so pause does not wait): it outlives this node's disk and is
   * addressable by sandbox ID for a resume elsewhere.
   */
  private commitPause(rec: SandboxRecord, imageDir: string): void {
    const id = rec.id;
    // Short pause/resume cycles (the common case in rollouts) never pay for a commit: it starts
    // once the sandbox has stayed paused a while.
    const timer = setTimeout(() => {
      this.pauseTimers.delete(id);
      const l = this.live.get(id);
      if (l?.rec.state === "paused" && l.rec.imageDir === imageDir && !this.closing) this.commitPauseNow(rec, imageDir);
    }, this.d.cfg.repository.pauseCommitDelayS * 1000);
    timer.unref();
    this.pauseTimers.set(id, timer);
  }

  private commitPauseNow(rec: SandboxRecord, imageDir: string): void {
    const id = rec.id;
    const t0 = Date.now();
    const p = this.d.repository
      .commit(pauseManifestId(id), imageDir, { kind: "pause", sandbox: { ...rec }, imageKey: this.d.imageKey })
      .then(({ manifest, stats }) => {
        // Its chunks stay in the node cache while it is paused: a resume never waits on a fetch.
        this.d.repository.pinManifest(manifest);
        this.d.log.info({ sandboxID: id, ...stats, ms: Date.now() - t0 }, "pause image committed");
      })
      .catch((err) => this.d.log.warn({ err, sandboxID: id }, "pause image not committed to the repository"))
      .finally(() => {
        if (this.pauseCommits.get(id) === p) this.pauseCommits.delete(id);
      });
    this.pauseCommits.set(id, p);
  }

  /** Once a sandbox runs again (or is gone) its pause manifest is obsolete. */
  private dropPause(id: string): void {
    const timer = this.pauseTimers.get(id);
    if (timer) {
      // Never committed: nothing to remove.
      clearTimeout(timer);
      this.pauseTimers.delete(id);
      return;
    }
    const pending = this.pauseCommits.get(id) ?? Promise.resolve();
    void pending
      .then(() => {
        this.d.repository.unpin(pauseManifestId(id));
        return this.d.repository.delete(pauseManifestId(id));
      })
      .catch((err) => this.d.log.warn({ err, sandboxID: id }, "pause manifest not removed"));
  }

  /**
   * Resume a paused sandbox (or extend a running one's TTL). Returns whether it was resumed.
   * The TTL after a resume is what was left at pause, and at least the requested timeout.
   */
  resume(id: string, timeoutS: number | undefined): Promise<{ rec: SandboxRecord; resumed: boolean }> {
    const l = this.mustGet(id);
    if (l.rec.state === "running" && !l.inflight)
      return Promise.resolve({ rec: this.extend(id, timeoutS), resumed: false });
    return this.joinOrRun(l, "resume", async () => {
      if (!this.live.has(id) || l.rec.state === "killing") throw notFound(`sandbox '${id}' not found`);
      if (l.rec.state === "running") return { rec: this.extend(id, timeoutS), resumed: false };
      const image = l.rec.imageDir ?? join(l.rec.dir, "image");
      if (!isCompleteImage(image)) await this.materializePause(id, image);
      this.admit();
      const t0 = Date.now();
      try {
        await this.bring(
          l,
          {
            kind: "image",
            imageDir: image,
          },
          undefined,
        );
      } catch (err) {
        await this.teardownRuntime(l);
        this.d.store.put(l.rec);
        throw new ApiError(500, `failed to resume sandbox '${id}': ${(err as Error).message}`);
      }
      const t = this.clampTimeout(timeoutS) * 1000;
      l.rec.endAt = Date.now() + Math.max(l.rec.ttlLeftMs ?? 0, t);
      l.rec.state = "running";
      l.rec.imageDir = undefined;
      l.rec.ttlLeftMs = undefined;
      this.d.store.put(l.rec);
      rmSync(image, { recursive: true, force: true });
      this.dropPause(id);
      this.d.log.info({ sandboxID: id, ms: Date.now() - t0 }, "sandbox resumed");
      return { rec: l.rec, resumed: true };
    });
  }

  // ---------------------------------------------------------------- snapshots

  async snapshot(id: string, name: string | undefined): Promise<SnapshotRecord> {
    const l = this.mustGet(id);
    if (name !== undefined && this.findSnapshot(name)) throw conflict(`a snapshot named '${name}' exists`);
    return this.serialize(l, async () => {
      if (l.rec.state !== "running") throw conflict(`sandbox '${id}' is not running`);
      const snapId = `snap_${randomBytes(8).toString("hex")}`;
      const final = join(this.dataDir, "snapshots", snapId);
      const tmp = `${final}.tmp`;
      mkdirSync(join(this.dataDir, "snapshots"), { recursive: true });
      const t0 = Date.now();
      let rec: SnapshotRecord;
      try {
        await this.capture(l, tmp);
        rec = this.snapshotRecord(l.rec, snapId, name, final, imageBytes(tmp));
        // Durable on this node first (image, then its record); the repository commit follows
        // in the background and is redone after a restart until it succeeds.
        commitImage(tmp, final);
        this.writePendingSnapshot(rec);
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
      this.snapshots.set(snapId, rec);
      this.commitSnapshot(rec);
      this.d.log.info({ sandboxID: id, snapshotID: snapId, ms: Date.now() - t0 }, "snapshot taken");
      return rec;
    });
  }

  private pendingPath(id: string): string {
    return join(this.dataDir, "snapshots", `${id}.pending.json`);
  }

  private writePendingSnapshot(rec: SnapshotRecord): void {
    const { imageDir: _local, ...data } = rec;
    const file = this.pendingPath(rec.id);
    writeFileSync(`${file}.tmp`, JSON.stringify(data));
    renameSync(`${file}.tmp`, file);
  }

  /** Commits a snapshot's local image to the repository; other servers can use it after. */
  private commitSnapshot(rec: SnapshotRecord): void {
    const { imageDir, committed: _c, uploadedBytes: _u, ...meta } = rec;
    const t0 = Date.now();
    const p = this.d.repository
      .commit(rec.id, imageDir, meta as unknown as Record<string, unknown>)
      .then(({ stats }) => {
        rec.uploadedBytes = stats.uploadedBytes;
        rec.committed = true;
        rmSync(this.pendingPath(rec.id), { force: true });
        this.d.log.info({ snapshotID: rec.id, ...stats, ms: Date.now() - t0 }, "snapshot committed to the repository");
      })
      .catch((err) =>
        this.d.log.warn(
          { err, snapshotID: rec.id },
          "snapshot not committed to the repository; retried at the next start",
        ),
      )
      .finally(() => {
        if (this.snapshotCommits.get(rec.id) === p) this.snapshotCommits.delete(rec.id);
      });
    this.snapshotCommits.set(rec.id, p);
  }

  private snapshotRecord(
    src: SandboxRecord,
    snapId: string,
    name: string | undefined,
    imageDir: string,
    sizeBytes: number,
  ): SnapshotRecord {
    return {
      id: snapId,
      names: [name ?? snapId],
      sandboxId: src.id,
      templateId: src.templateId,
      alias: src.alias,
      rootfs: src.rootfs,
      runtimeDir: src.runtimeDir,
      imageDir,
      envdToken: src.envdToken,
      envVars: src.envVars,
      cpuCount: src.cpuCount,
      memoryMB: src.memoryMB,
      diskSizeMB: src.diskSizeMB,
      sizeBytes,
      createdAt: Date.now(),
      imageKey: this.d.imageKey,
    };
  }

  /** Makes sure the node-local copy of a snapshot exists, rebuilding it from the repository. */
  private async materialize(snap: SnapshotRecord): Promise<void> {
    if (isCompleteImage(snap.imageDir)) return;
    try {
      await this.rebuildImage(snap.id, snap.imageDir);
    } catch (err) {
      if (isCompleteImage(snap.imageDir)) return; // a concurrent create won
      throw new ApiError(500, `snapshot '${snap.id}' cannot be loaded: ${(err as Error).message}`);
    }
  }

  /** Materialises a repository manifest into a complete image folder (temp name, then rename). */
  private async rebuildImage(manifestId: string, imageDir: string): Promise<void> {
    const tmp = `${imageDir}.tmp-${randomBytes(4).toString("hex")}`;
    try {
      await this.d.repository.materialize(manifestId, tmp);
      commitImage(tmp, imageDir);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }

  /**
   * A snapshot this node knows may have been deleted through another server sharing the
   * repository: its manifest decides. If the repository cannot be reached, the local copy is
   * used.
   */
  private async stillCommitted(snap: SnapshotRecord | undefined): Promise<SnapshotRecord | undefined> {
    if (!snap?.committed) return snap;
    const m = await this.d.repository.get(snap.id).then(
      (x) => x ?? null,
      () => undefined,
    );
    if (m !== null) return snap;
    this.d.log.info({ snapshotID: snap.id }, "snapshot was deleted from the repository elsewhere; forgetting it");
    this.snapshots.delete(snap.id);
    rmSync(snap.imageDir, { recursive: true, force: true });
    return undefined;
  }

  /** Rebuilds a paused sandbox's image from its pause manifest (the local copy is gone). */
  private async materializePause(id: string, image: string): Promise<void> {
    await this.pauseCommits.get(id);
    try {
      await this.rebuildImage(pauseManifestId(id), image);
      this.d.log.info({ sandboxID: id }, "pause image rebuilt from the repository");
    } catch (err) {
      throw new ApiError(500, `sandbox '${id}' has no usable pause image: ${(err as Error).message}`);
    }
  }

  /**
   * A snapshot this node has not seen yet: another node sharing the repository committed it.
   * Looked up by ID, then by name.
   */
  private async findRemoteSnapshot(ref: string): Promise<SnapshotRecord | undefined> {
    const fromManifest = (m: Manifest | undefined) => {
      const local = m && this.snapshotOfManifest(m);
      if (local) this.snapshots.set(local.id, local);
      return local;
    };
    if (/^[A-Za-z0-9_.-]{1,128}$/.test(ref)) {
      const byId = fromManifest(await this.d.repository.get(ref).catch(() => undefined));
      if (byId) return byId;
    }
    for (const m of await this.d.repository.listFresh().catch(() => [])) {
      const names = (m.meta as { names?: unknown }).names;
      if (Array.isArray(names) && names.includes(ref)) {
        return fromManifest(m);
      }
    }
    return undefined;
  }

  /** Whether sandboxes (running or paused) or snapshots still need a template's trees. */
  templateInUse(templateId: string): boolean {
    for (const l of this.live.values()) if (l.rec.templateId === templateId) return true;
    for (const s of this.snapshots.values()) if (s.templateId === templateId) return true;
    return false;
  }

  /** Drops a deleted template's warm images. */
  forgetTemplate(templateId: string): void {
    for (const k of [...this.warm.keys()]) if (k.startsWith(`${templateId}-r`)) this.warm.delete(k);
    const dir = join(this.d.cfg.templatesDir, ".warm");
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      if (name.startsWith(`${templateId}-r`)) rmSync(join(dir, name), { recursive: true, force: true });
    }
  }

  listSnapshots(): SnapshotRecord[] {
    return [...this.snapshots.values()].sort((a, b) => a.createdAt - b.createdAt);
  }

  /** A snapshot manifest's record as this node would keep it (undefined for other manifests). */
  private snapshotOfManifest(m: Manifest): SnapshotRecord | undefined {
    const rec = m.meta as unknown as SnapshotRecord | undefined;
    if (rec?.id !== m.id || !Array.isArray(rec.names)) return undefined;
    return { ...rec, imageDir: join(this.dataDir, "snapshots", m.id), committed: true };
  }

  /**
   * What GET /snapshots shows: this node's snapshots and those other servers sharing the
   * repository committed, less committed ones deleted elsewhere. This node's view alone
   * when the repository cannot be listed.
   */
  async listSharedSnapshots(): Promise<SnapshotRecord[]> {
    const local = this.listSnapshots();
    const manifests = await this.d.repository.listFresh().catch(() => undefined);
    if (!manifests) return local;
    const inRepo = new Set(manifests.map((m) => m.id));
    const out = local.filter((s) => !s.committed || inRepo.has(s.id));
    const known = new Set(local.map((s) => s.id));
    for (const m of manifests) {
      const rec = known.has(m.id) ? undefined : this.snapshotOfManifest(m);
      if (rec) out.push(rec);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id));
  }

  /** A snapshot by ID or name, here or committed by another server sharing the repository. */
  async findSharedSnapshot(ref: string): Promise<SnapshotRecord | undefined> {
    return (await this.stillCommitted(this.findSnapshot(ref))) ?? (await this.findRemoteSnapshot(ref));
  }

  async deleteSnapshot(ref: string): Promise<void> {
    const s = this.findSnapshot(ref);
    if (!s) throw notFound(`snapshot '${ref}' not found`);
    this.snapshots.delete(s.id);
    await this.snapshotCommits.get(s.id);
    await this.d.repository.delete(s.id);
    rmSync(this.pendingPath(s.id), { force: true });
    rmSync(s.imageDir, { recursive: true, force: true });
  }

  // ---------------------------------------------------------------- fork

  /**
   * One capture of the running source (it pauses only for that), then N children restored
   * from it in parallel, each with its own ID, slot and envd token. Children fail
   * independently; a failed child is fully removed; the capture is deleted afterwards.
   */
  async fork(id: string, count: number, timeoutS: number | undefined): Promise<ForkResult[]> {
    const l = this.mustGet(id);
    const parent = l.rec;
    const captureDir = join(this.dataDir, "forks", randomBytes(8).toString("hex"));
    await this.serialize(l, async () => {
      if (parent.state !== "running") throw conflict(`sandbox '${id}' is not running`);
      await this.capture(l, captureDir);
    });
    const ttlS = timeoutS ?? Math.max(1, Math.ceil((parent.endAt - Date.now()) / 1000));
    const results: ForkResult[] = new Array(count);
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < count; i = next++) {
        results[i] = await this.forkChild(parent, captureDir, ttlS).then(
          (sandbox) => ({ sandbox }),
          (err: unknown) => ({
            error: { code: err instanceof ApiError ? err.status : 500, message: (err as Error).message },
          }),
        );
      }
    };
    try {
      await Promise.all(Array.from({ length: Math.min(FORK_PARALLELISM, count) }, worker));
    } finally {
      rmSync(captureDir, { recursive: true, force: true });
    }
    return results;
  }

  private async forkChild(parent: SandboxRecord, imageDir: string, ttlS: number): Promise<SandboxRecord> {
    if (this.closing) throw new ApiError(503, "server is shutting down");
    this.admit();
    const id = newSandboxId();
    const rec = this.newRecord(
      id,
      join(this.dataDir, "sandboxes", id),
      parent.templateId,
      parent.alias,
      parent.rootfs,
      {
        templateID: parent.templateId,
        timeoutS: ttlS,
        metadata: { ...parent.metadata },
        envVars: { ...parent.envVars },
        allowInternetAccess: parent.allowInternet,
        autoPause: parent.autoPause,
        autoResume: parent.autoResume,
      },
      parent,
    );
    rec.runtimeDir = parent.runtimeDir;
    const live: Live = { rec, op: Promise.resolve() };
    this.live.set(id, live);
    try {
      await this.bring(
        live,
        {
          kind: "image",
          imageDir,
          oldToken: parent.envdToken,
        },
        { accessToken: rec.envdToken },
      );
      rec.state = "running";
      rec.endAt = Date.now() + this.clampTimeout(ttlS) * 1000;
      this.d.store.put(rec);
      return rec;
    } catch (err) {
      await this.teardown(live, true);
      if (err instanceof ApiError) throw err;
      if (/no free network slots/.test((err as Error).message)) throw new ApiError(429, "no free network slots");
      throw new ApiError(503, `fork child failed to start: ${(err as Error).message}`);
    }
  }

  // ---------------------------------------------------------------- metrics, shutdown

  async metrics(id: string): Promise<SandboxMetric[]> {
    const l = this.mustGet(id);
    const rec = l.rec;
    const stats = rec.state === "running" ? await this.d.driver.stats(rec.runtimeId) : undefined;
    let diskUsed = 0;
    let diskTotal = rec.diskSizeMB * 1024 * 1024;
    if (l.slot && rec.state === "running") {
      try {
        const r = await envdRequest(l.slot.slotIp, "GET", "/metrics", { token: rec.envdToken, timeoutMs: 2000 });
        if (r.status === 200) {
          const m = JSON.parse(r.body) as { disk_used?: number; disk_total?: number };
          diskUsed = m.disk_used ?? 0;
          diskTotal = m.disk_total ?? diskTotal;
        }
      } catch {
        // Metrics are best effort.
      }
    }
    return [
      {
        timestampUnix: Math.floor(Date.now() / 1000),
        cpuCount: rec.cpuCount,
        cpuUsedPct: Math.round((stats?.cpuUsedPct ?? 0) * 100) / 100,
        memUsed: stats?.memUsedBytes ?? 0,
        memTotal: rec.memoryMB * 1024 * 1024,
        memCache: stats?.memCacheBytes ?? 0,
        diskUsed,
        diskTotal,
      },
    ];
  }

  /**
   * Graceful stop: running sandboxes are killed (they cannot outlive their proxy usefully);
   * paused ones stay on disk and are resumable after the next start.
   */
  async close(): Promise<void> {
    this.closing = true;
    for (const t of this.pauseTimers.values()) clearTimeout(t);
    if (this.reaper) clearInterval(this.reaper);
    if (this.deadCheck) clearInterval(this.deadCheck);
    await Promise.all(
      [...this.live.values()].filter((l) => l.rec.state !== "paused").map((l) => this.kill(l.rec.id).catch(() => {})),
    );
    await Promise.all([...this.warming.values()]);
    await Promise.all([...this.snapshotCommits.values()]);
    await Promise.all([...this.cleanups.values()]);
  }
}
