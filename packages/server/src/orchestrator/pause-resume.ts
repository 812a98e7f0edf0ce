import { randomBytes } from "node:crypto";
import { renameSync, rmSync } from "node:fs";
import { rm } from "node:fs/promises";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import { ConflictError, NotFoundError, PausedError, StartFailedError } from "../errors.js";
import type { NodePaths } from "../node-paths.js";
import type { RuntimeDriver } from "../runtime/driver.js";
import type { BootSettings, PauseKind, SandboxRecord, StateStore } from "../state/store.js";
import { type PauseMeta, pauseClaimName, pauseManifestId, pauseMetaOf } from "../storage/repository/manifest-kinds.js";
import type { SnapshotRepository } from "../storage/repository/repository.js";
import { commitDirAsync } from "../util/fsync.js";
import { linkTree } from "../util/link-tree.js";
import { applyLayer, captureLayer, isCompleteLayer, layerBytes } from "./fs-layer.js";
import { clampTimeoutS } from "./records.js";
import type { Live, SandboxRegistry } from "./registry.js";
import { NotIdleError, type SandboxRunner } from "./runner.js";
import { materializeImage } from "./snapshots.js";
import { runStartCommand } from "./start-command.js";

export interface PauseResumeDeps {
  cfg: ServerConfig;
  paths: NodePaths;
  store: StateStore;
  registry: SandboxRegistry;
  runner: SandboxRunner;
  repository: SnapshotRepository;
  checkpointKey: string;
  /** A sandbox's template settings for a fresh boot (records from before they were kept lack them). */
  bootOf: (rec: SandboxRecord) => BootSettings | undefined;
  log: Logger;
}

/**
 * The most a filesystem layer may be: what the sandbox may keep (its disk size, or its memory
 * for /tmp), with room for tar headers. Anything larger is a sandbox streaming garbage.
 */
export function maxLayerBytes(rec: Pick<SandboxRecord, "memoryMB" | "diskSizeMB">): number {
  return Math.ceil(Math.max(rec.memoryMB, rec.diskSizeMB) * 1.25 + 64) * 2 ** 20;
}

/** Where a pause of this kind keeps what it keeps. */
export function pauseDir(paths: NodePaths, sandboxDir: string, kind: PauseKind | undefined): string {
  return kind === "filesystem" ? paths.fsLayer(sandboxDir) : paths.pauseImage(sandboxDir);
}

/** Whether a paused sandbox's image (checkpoint or filesystem layer) is all there. */
export function isCompletePause(driver: RuntimeDriver, kind: PauseKind | undefined, dir: string | undefined): boolean {
  return kind === "filesystem" ? isCompleteLayer(dir) : driver.isCompleteCheckpoint(dir);
}

/** Traffic never resumes a filesystem-only pause: it would reboot the sandbox under its caller. */
export function autoResumable(rec: Pick<SandboxRecord, "autoResume" | "pauseKind" | "idleSaved">): boolean {
  // Saved by hibernation: running as far as its client knows, so any use brings it back.
  if (rec.idleSaved) return true;
  return rec.autoResume && rec.pauseKind !== "filesystem";
}

/** What traffic to a paused sandbox it will not resume gets. */
export function pausedError(rec: Pick<SandboxRecord, "id" | "pauseKind">): PausedError {
  return new PausedError(
    rec.pauseKind === "filesystem"
      ? `sandbox '${rec.id}' is paused (filesystem only); resume it with connect`
      : `sandbox '${rec.id}' is paused; resume it (connect) or create it with autoResume`,
  );
}

/**
 * Pause = capture (memory, processes, writable layer), make the image durable, then stop the
 * sandbox and free its slot; the image is committed to the repository once the sandbox has
 * stayed paused a while, so any node can resume it. Resume = restore that image.
 * A filesystem-only pause keeps just the writable layer (envd streams it out); its resume
 * boots the template afresh, has envd put the layer back, then runs the start command.
 */
export class PauseResume {
  /** Pause images waiting to be committed, by sandbox ID. */
  private readonly timers = new Map<string, NodeJS.Timeout>();
  /** Commits of pause images still running, by sandbox ID. */
  private readonly commits = new Map<string, Promise<void>>();

  constructor(private readonly d: PauseResumeDeps) {}

  /**
   * Until the image is durable the sandbox still runs, so a crash leaves it running or paused.
   * `idle`: hibernation's save (see Hibernation), done only if `stillIdle()` once the queue
   * gets to it and envd finds no connection to outside; NotIdleError otherwise.
   */
  async pause(id: string, opts: { memory?: boolean; idle?: boolean; stillIdle?: () => boolean } = {}): Promise<void> {
    const { registry, runner } = this.d;
    // Hibernation saves memory and all: its sandbox must come back exactly as it was.
    const kind: PauseKind = opts.memory === false && !opts.idle ? "filesystem" : "memory";
    const l = registry.mustGet(id);
    if (l.rec.state === "paused" && !l.inflight && !l.rec.idleSaved) {
      throw new ConflictError(`sandbox '${id}' is already paused`);
    }
    return registry.joinOrRun(l, "pause", async () => {
      if (!registry.has(id) || l.rec.state === "killing") throw new NotFoundError(`sandbox '${id}' not found`);
      if (l.rec.state === "paused" && l.rec.idleSaved && !opts.idle) return this.keepSaved(l);
      if (l.rec.state === "paused") throw new ConflictError(`sandbox '${id}' is already paused`);
      if (opts.idle && !(opts.stillIdle?.() ?? true)) throw new NotIdleError("used since it was found idle");
      // A client's memory pause answers once the sandbox is stopped; its image is written next.
      if (kind === "memory" && !opts.idle && runner.driver.suspend) return this.suspend(l);
      const t0 = Date.now();
      const steps: Record<string, number> = {};
      let last = t0;
      const step = (name: string) => {
        const now = Date.now();
        steps[name] = now - last;
        last = now;
      };
      const final = pauseDir(this.d.paths, l.rec.dir, kind);
      const tmp = `${final}.tmp`;
      let gateOpen!: () => void;
      const gate = new Promise<void>((res) => (gateOpen = res));
      let bytes: number;
      try {
        if (kind === "memory") {
          await runner.capture(l, tmp, opts.idle ? { unlessExternalTcp: true } : {});
          step("capture");
          // Traffic arriving from here on must see the sandbox paused, not half-stopped.
          l.gate = gate;
          await commitDirAsync(tmp, final);
          step("commit");
          bytes = runner.driver.checkpointBytes(final);
        } else {
          // The sandbox goes on while its layer streams out: traffic waits from the start, and
          // requests in flight are cut (as before a checkpoint), not half taken into the layer.
          l.gate = gate;
          if (!l.slot) throw new ConflictError(`sandbox '${id}' is not running`);
          await runner.quiesce(l, l.rec.envdToken);
          bytes = await captureLayer(l.slot.slotIp, l.rec.envdToken, final, maxLayerBytes(l.rec));
        }
        l.rec.ttlLeftMs = Math.max(0, l.rec.endAt - Date.now());
        await runner.stopRuntime(l);
        step("stop");
        l.rec.state = "paused";
        l.rec.imageDir = final;
        l.rec.pauseKind = kind;
        l.rec.pauseTag = randomBytes(6).toString("hex");
        l.rec.pausedAt = Date.now();
        l.rec.pauseBytes = bytes;
        if (opts.idle) l.rec.idleSaved = true;
        this.d.store.put(l.rec);
        step("record");
      } finally {
        if (l.gate === gate) l.gate = undefined;
        gateOpen();
        rmSync(tmp, { recursive: true, force: true });
      }
      const msg = opts.idle ? "idle sandbox saved to disk (hibernated)" : "sandbox paused";
      this.d.log.info({ sandboxID: id, kind, ms: Date.now() - t0, steps, bytes }, msg);
      this.commitLater(l.rec, final);
    });
  }

  /**
   * Pause, answered early: the sandbox's tasks stop in place (quiesced as for a checkpoint)
   * and it is paused from then on; its image is written by the operation queued right behind
   * (writeImage), so anything done to the sandbox afterwards (resume, fork, kill) waits for it.
   * A resume that comes first finds the sandbox still in memory and lets it go on (no image).
   */
  private async suspend(l: Live): Promise<void> {
    const t0 = Date.now();
    await this.d.runner.suspend(l);
    const rec = l.rec;
    rec.ttlLeftMs = Math.max(0, rec.endAt - Date.now());
    rec.state = "paused";
    rec.imageDir = pauseDir(this.d.paths, rec.dir, "memory");
    rec.pauseKind = "memory";
    rec.pauseTag = randomBytes(6).toString("hex");
    rec.pausedAt = Date.now();
    rec.pauseBytes = undefined;
    rec.imagePending = true;
    this.d.store.put(rec);
    const suspendedMs = Date.now() - t0;
    this.d.log.info({ sandboxID: rec.id, kind: "memory", ms: suspendedMs }, "sandbox paused (stopped in place)");
    void this.d.registry
      .enqueue(l, () => this.writeImage(l, suspendedMs))
      .catch((err) => this.d.log.error({ err, sandboxID: rec.id }, "pause image not written"));
  }

  /**
   * The image of a pause answered early: checkpoint of the suspended sandbox, made durable,
   * then its runtime stops. Skipped when a resume is already waiting (it lets the sandbox go
   * on); kept in memory when one came meanwhile. On failure the sandbox stays suspended and
   * paused (a resume still works; a host crash would lose it, as it would a running one).
   */
  private async writeImage(l: Live, suspendedMs: number): Promise<void> {
    const { rec } = l;
    const { runner } = this.d;
    const resumeWaits = () => l.inflight?.kind === "resume";
    if (!this.d.registry.has(rec.id) || rec.state !== "paused" || !rec.imagePending || !l.suspended) return;
    if (resumeWaits()) return;
    const t0 = Date.now();
    const final = rec.imageDir ?? pauseDir(this.d.paths, rec.dir, "memory");
    const tmp = `${final}.tmp`;
    try {
      await runner.checkpointInto(rec.runtimeId, tmp);
      const checkpointMs = Date.now() - t0;
      await commitDirAsync(tmp, final);
      rec.pauseBytes = runner.driver.checkpointBytes(final);
      rec.imagePending = undefined;
      if (!resumeWaits()) await runner.stopRuntime(l);
      this.d.store.put(rec);
      this.d.log.info(
        {
          sandboxID: rec.id,
          ms: suspendedMs + Date.now() - t0,
          steps: { suspend: suspendedMs, checkpoint: checkpointMs, commit: Date.now() - t0 - checkpointMs },
          bytes: rec.pauseBytes,
        },
        "sandbox paused (image written)",
      );
      if (!l.suspended) this.commitLater(rec, final);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }

  /**
   * A client (or its TTL's expiry) pauses a sandbox hibernation had saved: it already is, on
   * disk; from now on it is the client's pause (shown paused, TTL stopped, resumed only as the
   * client's settings say). The image keeps its memory even where a filesystem-only pause was
   * asked for: it holds the filesystem too, and a resume brings the processes back as well.
   */
  private keepSaved(l: Live): void {
    l.rec.idleSaved = undefined;
    l.rec.ttlLeftMs = Math.max(0, l.rec.endAt - Date.now());
    l.rec.pausedAt = Date.now();
    this.d.store.put(l.rec);
    this.d.log.info({ sandboxID: l.rec.id }, "sandbox saved by hibernation now paused (its image kept)");
  }

  /**
   * Resumes a paused sandbox (or extends a running one's TTL). The TTL after a resume is what
   * was left at pause, and at least the requested timeout.
   */
  async resume(
    id: string,
    timeoutS: number | undefined,
    extend: (id: string, timeoutS: number | undefined) => SandboxRecord,
  ): Promise<{ rec: SandboxRecord; resumed: boolean }> {
    const { registry, runner } = this.d;
    const l = registry.mustGet(id);
    if (l.rec.state === "running" && !l.inflight) return { rec: extend(id, timeoutS), resumed: false };
    return registry.joinOrRun(l, "resume", async () => {
      if (!registry.has(id) || l.rec.state === "killing") throw new NotFoundError(`sandbox '${id}' not found`);
      if (l.rec.state === "running") return { rec: extend(id, timeoutS), resumed: false };
      const kind = l.rec.pauseKind ?? "memory";
      const image = l.rec.imageDir ?? pauseDir(this.d.paths, l.rec.dir, kind);
      const t0 = Date.now();
      const inPlace = !!l.suspended;
      if (inPlace) {
        // Paused moments ago and still in memory (no image needed any more): it goes on.
        registry.admit(l);
        try {
          await runner.unsuspend(l);
        } catch (err) {
          registry.release(l);
          throw new StartFailedError(`failed to resume sandbox '${id}': ${(err as Error).message}`);
        }
      } else {
        await this.claim(l.rec);
        if (!isCompletePause(runner.driver, kind, image)) await this.rebuildFromRepository(id, image);
        // Held from here: parallel resumes of other sandboxes see this one's share at once.
        registry.admit(l);
        try {
          if (kind === "memory") await runner.bring(l, { kind: "image", imageDir: image }, undefined);
          else await this.bootWithLayer(l, image);
        } catch (err) {
          registry.release(l);
          await runner.stopRuntime(l);
          this.d.store.put(l.rec);
          throw new StartFailedError(`failed to resume sandbox '${id}': ${(err as Error).message}`);
        }
      }
      const t = clampTimeoutS(this.d.cfg, timeoutS) * 1000;
      if (l.rec.idleSaved) {
        // Its TTL never stopped: kept, extended as a running sandbox's would be by this call.
        if (timeoutS !== undefined) l.rec.endAt = Math.max(l.rec.endAt, Date.now() + t);
      } else {
        l.rec.endAt = Date.now() + Math.max(l.rec.ttlLeftMs ?? 0, t);
      }
      l.rec.idleSaved = undefined;
      l.rec.state = "running";
      registry.release(l);
      l.rec.imageDir = undefined;
      l.rec.pauseKind = undefined;
      l.rec.ttlLeftMs = undefined;
      l.rec.pausedAt = undefined;
      l.rec.pauseBytes = undefined;
      l.rec.imagePending = undefined;
      this.d.store.put(l.rec);
      // The used image goes after the answer (a big one takes a while to delete); renamed
      // first, so a pause right after cannot lose its new image to this removal.
      const trash = `${image}.used-${randomBytes(4).toString("hex")}`;
      try {
        renameSync(image, trash);
        setImmediate(() => rm(trash, { recursive: true, force: true }).catch(() => {}));
      } catch {
        rmSync(image, { recursive: true, force: true });
      }
      // Resumed in place, its image was never committed: no manifest to remove.
      if (!inPlace) this.forget(id);
      this.d.log.info({ sandboxID: id, kind, ms: Date.now() - t0, inPlace }, "sandbox resumed");
      return { rec: l.rec, resumed: true };
    });
  }

  /**
   * A resume from a filesystem-only pause: the same sandbox (ID, token, env) boots from its
   * template tree, envd applies the kept layer before anything else runs, then the template's
   * start command runs as at a cold create.
   */
  private async bootWithLayer(l: Live, layer: string): Promise<void> {
    const { rec } = l;
    const boot = this.d.bootOf(rec);
    await this.d.runner.bring(
      l,
      { kind: "boot" },
      {
        accessToken: rec.envdToken,
        envVars: { ...boot?.env, ...rec.envVars },
        ...(boot?.user ? { defaultUser: boot.user } : {}),
        ...(boot?.workdir ? { defaultWorkdir: boot.workdir } : {}),
      },
    );
    if (!l.slot) throw new Error("sandbox lost its network slot while booting");
    const stats = await applyLayer(l.slot.slotIp, rec.envdToken, layer);
    this.d.log.info({ sandboxID: rec.id, ...stats, layerBytes: layerBytes(layer) }, "filesystem layer applied");
    if (boot?.startCmd) await runStartCommand(l.slot.slotIp, boot, rec.envdToken);
  }

  /**
   * For a fork of a paused sandbox: its pause image (rebuilt from the repository if this
   * node's copy is gone), hard-linked into `dest`. Called in the sandbox's op queue, so no
   * resume renames the image meanwhile; afterwards the links hold the files whatever happens
   * to the parent. The parent stays paused and unclaimed.
   */
  async linkImage(l: Live, dest: string): Promise<void> {
    const rec = l.rec;
    if (rec.pauseKind === "filesystem") {
      throw new ConflictError(`sandbox '${rec.id}' is paused (filesystem only): resume it to fork it`);
    }
    // Paused in place and its image skipped for a resume that then failed: written now.
    if (rec.imagePending && l.suspended) await this.writeImage(l, 0);
    const image = rec.imageDir ?? pauseDir(this.d.paths, rec.dir, "memory");
    if (!this.d.runner.driver.isCompleteCheckpoint(image)) await this.rebuildFromRepository(rec.id, image);
    linkTree(image, dest);
  }

  /**
   * In a cluster, once a pause image is (being) committed any node may resume it: the first to
   * claim it in the repository does; a node that finds another's claim (it restarted with an
   * old copy, or lost a race Redis should have prevented) drops its copy and says not found.
   */
  private async claim(rec: SandboxRecord): Promise<void> {
    const nodeId = this.d.cfg.cluster?.nodeId;
    if (!nodeId || this.timers.has(rec.id)) return; // never committed: no other node can have it
    await this.commits.get(rec.id);
    if (await this.d.repository.claim(pauseClaimName(rec), nodeId)) return;
    this.d.log.warn({ sandboxID: rec.id }, "pause was resumed by another node; dropping this node's copy");
    this.dropMoved(rec);
    throw new NotFoundError(`sandbox '${rec.id}' was resumed on another node`);
  }

  /** Forgets a paused sandbox another node took over; its repository objects are that node's now. */
  dropMoved(rec: SandboxRecord): void {
    this.d.repository.unpin(pauseManifestId(rec.id));
    this.d.store.delete(rec.id);
    this.d.registry.remove(rec.id);
    rmSync(rec.dir, { recursive: true, force: true });
  }

  /**
   * Commits a pause image to the repository in the background (the local image is already
   * durable, so pause does not wait). Short pause/resume cycles, the common case in rollouts,
   * never pay for it: it starts once the sandbox has stayed paused a while.
   */
  commitLater(rec: SandboxRecord, imageDir: string): void {
    const id = rec.id;
    const timer = setTimeout(() => {
      this.timers.delete(id);
      const l = this.d.registry.get(id);
      if (l?.rec.state === "paused" && l.rec.imageDir === imageDir && !this.d.registry.isClosing) {
        this.commitNow(rec, imageDir);
      }
    }, this.d.cfg.repository.pauseCommitDelayS * 1000);
    timer.unref();
    this.timers.set(id, timer);
  }

  private commitNow(rec: SandboxRecord, imageDir: string): void {
    const id = rec.id;
    const t0 = Date.now();
    const meta: PauseMeta = { kind: "pause", sandbox: { ...rec }, imageKey: this.d.checkpointKey };
    const p = this.d.repository
      .commit(pauseManifestId(id), imageDir, meta)
      .then(({ manifest, stats }) => {
        // Its chunks stay in the node cache while it is paused: a resume never waits on a fetch.
        this.d.repository.pinManifest(manifest);
        this.d.log.info({ sandboxID: id, ...stats, ms: Date.now() - t0 }, "pause image committed");
      })
      .catch((err) => this.d.log.warn({ err, sandboxID: id }, "pause image not committed to the repository"))
      .finally(() => {
        if (this.commits.get(id) === p) this.commits.delete(id);
      });
    this.commits.set(id, p);
  }

  /** Once a sandbox runs again (or is gone) its pause manifest is obsolete. */
  forget(id: string): void {
    const timer = this.timers.get(id);
    if (timer) {
      // Never committed: nothing to remove.
      clearTimeout(timer);
      this.timers.delete(id);
      return;
    }
    const pending = this.commits.get(id) ?? Promise.resolve();
    void pending
      .then(() => {
        this.d.repository.unpin(pauseManifestId(id));
        return this.d.repository.delete(pauseManifestId(id));
      })
      .catch((err) => this.d.log.warn({ err, sandboxID: id }, "pause manifest not removed"));
  }

  /** Rebuilds a paused sandbox's image from its pause manifest (the local copy is gone). */
  private async rebuildFromRepository(id: string, image: string): Promise<void> {
    await this.commits.get(id);
    try {
      await materializeImage(this.d.repository, pauseManifestId(id), image);
      this.d.log.info({ sandboxID: id }, "pause image rebuilt from the repository");
    } catch (err) {
      throw new StartFailedError(`sandbox '${id}' has no usable pause image: ${(err as Error).message}`);
    }
  }

  close(): void {
    for (const t of this.timers.values()) clearTimeout(t);
  }

  /** Once every pause answered before its image was written has it (their queued operation). */
  async imagesWritten(): Promise<void> {
    await Promise.all(
      this.d.registry
        .all()
        .filter((l) => l.rec.imagePending)
        .map((l) => l.op),
    );
  }

  /** Commits every paused sandbox's image now and waits (a node about to leave the cluster). */
  async flush(): Promise<void> {
    await this.imagesWritten();
    for (const [id, timer] of this.timers) {
      clearTimeout(timer);
      this.timers.delete(id);
      const l = this.d.registry.get(id);
      if (l?.rec.state === "paused" && l.rec.imageDir) this.commitNow(l.rec, l.rec.imageDir);
    }
    await Promise.all([...this.commits.values()]);
  }

  /** Whether a paused sandbox's image is in the repository (any node can resume it). */
  async committed(id: string): Promise<boolean> {
    await this.commits.get(id);
    return !!(await this.d.repository.get(pauseManifestId(id)).catch(() => undefined));
  }

  /**
   * A sandbox paused on another node (gone, or drained) is taken over from its pause manifest:
   * its record comes with it, its image is rebuilt from the repository when it resumes.
   */
  async adopt(id: string, runtimeDir: string, opts: { auto?: boolean } = {}): Promise<boolean> {
    const m = await this.d.repository.get(pauseManifestId(id)).catch(() => undefined);
    const meta =
      m && pauseMetaOf(m, (err) => this.d.log.error({ sandboxID: id }, `${err.message}; treated as unusable`));
    if (!meta || meta.sandbox.id !== id || this.d.registry.has(id)) return false;
    // The tree comes from the repository: only one of this node's template trees is mounted.
    if (!this.d.paths.isTemplateTree(meta.sandbox.rootfs)) {
      this.d.log.error({ sandboxID: id, rootfs: meta.sandbox.rootfs }, "paused sandbox names no template tree here");
      throw new StartFailedError(`sandbox '${id}' needs the template tree ${meta.sandbox.rootfs}, not on this node`);
    }
    if (opts.auto && !autoResumable(meta.sandbox)) throw pausedError(meta.sandbox);
    // A filesystem layer needs only the template tree; a checkpoint needs the same runtime.
    if (meta.sandbox.pauseKind !== "filesystem" && meta.imageKey !== this.d.checkpointKey) {
      throw new StartFailedError(
        `sandbox '${id}' was paused on another runtime (${meta.imageKey}, here ${this.d.checkpointKey})`,
      );
    }
    const dir = this.d.paths.sandbox(id);
    const rec: SandboxRecord = {
      ...meta.sandbox,
      state: "paused",
      dir,
      imageDir: pauseDir(this.d.paths, dir, meta.sandbox.pauseKind),
      slotIndex: null,
      runtimeDir,
    };
    this.d.store.put(rec);
    this.d.registry.add({ rec, op: Promise.resolve() });
    this.d.log.info({ sandboxID: id }, "paused sandbox taken over from the repository");
    return true;
  }
}
