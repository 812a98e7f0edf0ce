import { randomBytes } from "node:crypto";
import { renameSync, rmSync } from "node:fs";
import { rm } from "node:fs/promises";
import { ConflictError, NotFoundError, StartFailedError } from "@aenv/edge/errors";
import type { PausedSandboxRecord, PauseKind, SandboxRecord } from "../state/store.js";
import { commitDirAsync } from "../util/fsync.js";
import { linkTree } from "../util/link-tree.js";
import { envdTokenOf } from "./envd-credentials.js";
import { applyLayer, captureLayer, layerBytes } from "./fs-layer.js";
import type { NodeContext } from "./node-context.js";
import type { PauseCommits } from "./pause-commits.js";
import { isCompletePause, maxLayerBytes, pauseDir } from "./pause-kinds.js";
import { bootSettings, clampTimeoutS } from "./records.js";
import type { Live } from "./registry.js";
import { NotIdleError } from "./runner.js";
import { runStartCommand } from "./start-command.js";
import { admitForResume, deferRuntime } from "./start-undo.js";
import { extendTtl } from "./ttl.js";

/**
 * Pause = capture (memory, processes, writable layer), make the image durable, then stop the
 * sandbox and free its slot; the image is committed to the repository once the sandbox has
 * stayed paused a while, so any node can resume it. Resume = restore that image.
 * A filesystem-only pause keeps just the writable layer (envd streams it out); its resume
 * boots the template afresh, has envd put the layer back, then runs the start command.
 */
export class PauseResume {
  /** Pauses answered early whose image write waits out its delay: each writes at once if called. */
  private readonly delayed = new Map<string, () => void>();

  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: {
      /** The repository side: commits of pause images, claims, rebuilds. */
      commits: PauseCommits;
    },
  ) {}

  /**
   * Until the image is durable the sandbox still runs, so a crash leaves it running or paused.
   * `idle`: hibernation's save (see Hibernation), done only if `stillIdle()` once the queue
   * gets to it and envd finds no connection to outside; NotIdleError otherwise.
   */
  async pause(id: string, opts: { memory?: boolean; idle?: boolean; stillIdle?: () => boolean } = {}): Promise<void> {
    const { registry, runner } = this.ctx;
    // Hibernation saves memory and all: its sandbox must come back exactly as it was.
    const kind: PauseKind = opts.memory === false && !opts.idle ? "filesystem" : "memory";
    const l = registry.mustGet(id);
    if (l.rec.state === "paused" && !l.inflight && !l.rec.pause.idleSaved) {
      throw new ConflictError(`sandbox '${id}' is already paused`);
    }
    return registry.joinOrRun(l, "pause", async () => {
      if (!registry.has(id) || l.rec.state === "killing") throw new NotFoundError(`sandbox '${id}' not found`);
      if (l.rec.state === "paused" && l.rec.pause.idleSaved && !opts.idle) return this.keepSaved(l, l.rec);
      if (l.rec.state === "paused") throw new ConflictError(`sandbox '${id}' is already paused`);
      if (opts.idle && !(opts.stillIdle?.() ?? true)) throw new NotIdleError("used since it was found idle");
      // A client's memory pause answers once the sandbox is stopped; its image is written next
      // (unless the operator wants the answer to mean durable: sandbox.pause_waits_for_image).
      if (kind === "memory" && !opts.idle && runner.driver.suspender && !this.ctx.cfg.pauseWaitsForImage) {
        return this.suspend(l);
      }
      const t0 = Date.now();
      const steps: Record<string, number> = {};
      let last = t0;
      const step = (name: string) => {
        const now = Date.now();
        steps[name] = now - last;
        last = now;
      };
      const final = pauseDir(this.ctx.paths, l.rec.dir, kind);
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
          await runner.quiesce(l, envdTokenOf(l.rec));
          bytes = await captureLayer(l.slot.slotIp, envdTokenOf(l.rec), final, maxLayerBytes(l.rec));
        }
        const ttlLeftMs = Math.max(0, l.rec.endAt - Date.now());
        await runner.stopRuntime(l);
        step("stop");
        this.ctx.states.paused(l.rec, ttlLeftMs, {
          imageDir: final,
          kind,
          tag: randomBytes(6).toString("hex"),
          bytes,
          ...(opts.idle ? { idleSaved: true } : {}),
        });
        step("record");
      } finally {
        if (l.gate === gate) l.gate = undefined;
        gateOpen();
        rmSync(tmp, { recursive: true, force: true });
      }
      const msg = opts.idle ? "idle sandbox saved to disk (hibernated)" : "sandbox paused";
      this.ctx.log.info({ sandboxID: id, kind, ms: Date.now() - t0, steps, bytes }, msg);
      if (!opts.idle) this.ctx.events.emit("paused", l.rec);
      this.uses.commits.commitLater(l.rec, final);
    });
  }

  /**
   * Pause, answered early: the sandbox's tasks stop in place (quiesced as for a checkpoint)
   * and it is paused from then on; its image is written by an operation queued
   * `pauseImageDelayMs` later (writeImage), so anything done to the sandbox after that (resume,
   * fork, kill) waits for it. A resume or kill that comes first finds the sandbox still in
   * memory: it goes on (or ends) without an image; a fork writes the image itself (linkImage);
   * a shutdown or drain writes the delayed ones at once (imagesWritten).
   */
  private async suspend(l: Live): Promise<void> {
    const t0 = Date.now();
    await this.ctx.runner.suspend(l);
    const rec = l.rec;
    this.ctx.states.paused(rec, Math.max(0, rec.endAt - Date.now()), {
      imageDir: pauseDir(this.ctx.paths, rec.dir, "memory"),
      kind: "memory",
      tag: randomBytes(6).toString("hex"),
      bytes: undefined,
      imagePending: true,
    });
    const suspendedMs = Date.now() - t0;
    this.ctx.log.info({ sandboxID: rec.id, kind: "memory", ms: suspendedMs }, "sandbox paused (stopped in place)");
    this.ctx.events.emit("paused", rec);
    // Written a moment later: a resume (an agent's next turn) or a kill that comes first
    // needs no image, and waits for none (a checkpoint under way cannot be cut short).
    const tag = rec.pause?.tag;
    const write = () => {
      this.delayed.delete(rec.id);
      void this.ctx.registry
        .enqueue(l, () => (rec.pause?.tag === tag ? this.writeImage(l, suspendedMs) : Promise.resolve()))
        .catch((err) => this.ctx.log.error({ err, sandboxID: rec.id }, "pause image not written"));
    };
    const delayMs = this.ctx.cfg.pauseImageDelayMs;
    if (delayMs <= 0) return write();
    this.delayed.get(rec.id)?.();
    const timer = setTimeout(write, delayMs);
    this.delayed.set(rec.id, () => {
      clearTimeout(timer);
      write();
    });
  }

  /**
   * The image of a pause answered early: checkpoint of the suspended sandbox, made durable,
   * then its runtime stops. Skipped when a resume is already waiting (it lets the sandbox go
   * on); kept in memory when one came meanwhile. On failure the sandbox stays suspended and
   * paused (a resume still works; a host crash would lose it, as it would a running one).
   */
  private async writeImage(l: Live, suspendedMs: number, forReboot = false): Promise<void> {
    const { rec } = l;
    const { runner } = this.ctx;
    // A reboot (resume without memory) needs the image as its fallback: written all the same.
    const resumeWaits = () => !forReboot && l.inflight?.kind === "resume";
    if (!this.ctx.registry.has(rec.id) || rec.state !== "paused" || !rec.pause.imagePending || !l.suspended) return;
    if (resumeWaits()) return;
    const t0 = Date.now();
    const final = rec.pause.imageDir ?? pauseDir(this.ctx.paths, rec.dir, "memory");
    const tmp = `${final}.tmp`;
    try {
      await runner.checkpointInto(rec.runtimeId, tmp);
      const checkpointMs = Date.now() - t0;
      await commitDirAsync(tmp, final);
      const bytes = runner.driver.checkpointBytes(final);
      if (!resumeWaits()) await runner.stopRuntime(l);
      // Still this pause (a resume in place may have come meanwhile): its image is here.
      if (rec.state === "paused") this.ctx.states.imageWritten(rec, final, bytes);
      else this.ctx.states.save(rec);
      this.ctx.log.info(
        {
          sandboxID: rec.id,
          ms: suspendedMs + Date.now() - t0,
          steps: { suspend: suspendedMs, checkpoint: checkpointMs, commit: Date.now() - t0 - checkpointMs },
          bytes,
        },
        "sandbox paused (image written)",
      );
      if (!l.suspended) this.uses.commits.commitLater(rec, final);
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
  private keepSaved(l: Live, rec: PausedSandboxRecord): void {
    this.ctx.states.savedNowPaused(rec);
    this.ctx.log.info({ sandboxID: l.rec.id }, "sandbox saved by hibernation now paused (its image kept)");
    this.ctx.events.emit("paused", l.rec);
  }

  /**
   * Resumes a paused sandbox (or extends a running one's TTL). The TTL after a resume is what
   * was left at pause, and at least the requested timeout. `memory: false` boots a pause that
   * kept memory from its filesystem instead (reboot); for any other sandbox it changes nothing.
   */
  async resume(
    id: string,
    timeoutS: number | undefined,
    opts: { memory?: boolean } = {},
  ): Promise<{ rec: SandboxRecord; resumed: boolean }> {
    const { registry, runner } = this.ctx;
    const l = registry.mustGet(id);
    if (l.rec.state === "running" && !l.inflight) return { rec: extendTtl(this.ctx, id, timeoutS), resumed: false };
    return registry.joinOrRun(l, "resume", async () => {
      if (!registry.has(id) || l.rec.state === "killing") throw new NotFoundError(`sandbox '${id}' not found`);
      if (l.rec.state !== "paused") return { rec: extendTtl(this.ctx, id, timeoutS), resumed: false };
      const pause = l.rec.pause;
      const kind = pause.kind ?? "memory";
      const image = pause.imageDir ?? pauseDir(this.ctx.paths, l.rec.dir, kind);
      const t0 = Date.now();
      // Saved by hibernation, it is running to its client: brought back as it was.
      const reboot = opts.memory === false && kind === "memory" && !pause.idleSaved;
      const inPlace = !!l.suspended && !reboot;
      if (reboot) await this.reboot(l, image);
      else if (inPlace) {
        // Paused moments ago and still in memory (no image needed any more): it goes on.
        registry.admit(l);
        try {
          await runner.unsuspend(l);
        } catch (err) {
          registry.release(l);
          throw new StartFailedError(`failed to resume sandbox '${id}': ${(err as Error).message}`);
        }
      } else {
        await this.uses.commits.claimWhole(l.rec, image, isCompletePause(runner.driver, kind, image));
        // Held from here: parallel resumes of other sandboxes see this one's share at once.
        const undo = admitForResume(this.ctx, l);
        deferRuntime(undo, this.ctx, l, { keepDir: true });
        try {
          if (kind === "memory") {
            await runner.bring(l, { kind: "image", imageDir: image }, undefined);
            // Paused before envd held host tokens: its image holds the client's token, which
            // the proxy no longer forwards; exchanged for the host token now.
            if (l.rec.envdCredential !== "host") {
              await runner.initEnvd(l, { accessToken: l.rec.envdToken }, l.rec.envdToken);
            }
          } else await this.bootWithLayer(l, image);
          undo.release();
        } catch (err) {
          await undo.unwind();
          throw new StartFailedError(`failed to resume sandbox '${id}': ${(err as Error).message}`);
        }
      }
      const t = clampTimeoutS(this.ctx.cfg, timeoutS) * 1000;
      // Saved by hibernation, it was running to its client: its TTL never stopped (kept,
      // extended as a running sandbox's would be by this call), and its resume is no event.
      const wasPaused = !pause.idleSaved;
      let endAt = Date.now() + Math.max(pause.ttlLeftMs ?? 0, t);
      if (!wasPaused) endAt = timeoutS !== undefined ? Math.max(l.rec.endAt, Date.now() + t) : l.rec.endAt;
      this.ctx.states.resumed(l.rec, endAt);
      registry.release(l);
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
      if (!inPlace) this.uses.commits.forget(id);
      this.ctx.log.info({ sandboxID: id, kind, ms: Date.now() - t0, inPlace, reboot }, "sandbox resumed");
      if (wasPaused) this.ctx.events.emit("resumed", l.rec);
      return { rec: l.rec, resumed: true };
    });
  }

  /**
   * A pause with memory resumed without it (E2B's connect with memory: false, "reboot"): the
   * sandbox cold-boots from its filesystem as it was at the pause; processes and memory are
   * gone. runsc keeps the writable layer's tree inside the checkpoint (the sentry's state), so
   * there is no disk to boot from without restoring it: the image is restored just long
   * enough for envd to stream the layer out, that runtime stops, and the template boots with
   * the layer as a filesystem-only pause resumes. The image is only read: if anything fails
   * the sandbox stays paused with it, and a plain connect still restores its memory.
   */
  private async reboot(l: Live, image: string): Promise<void> {
    const { runner } = this.ctx;
    const { rec } = l;
    // Paused in place moments ago: its image is written first, the fallback if the boot fails.
    if (l.suspended && rec.pause?.imagePending) await this.writeImage(l, 0, true);
    if (l.suspended) await runner.stopRuntime(l);
    await this.uses.commits.claimWhole(rec, image, runner.driver.isCompleteCheckpoint(image));
    const layer = `${pauseDir(this.ctx.paths, rec.dir, "filesystem")}.reboot`;
    const undo = admitForResume(this.ctx, l);
    deferRuntime(undo, this.ctx, l, { keepDir: true });
    try {
      await runner.bring(l, { kind: "image", imageDir: image }, undefined);
      if (rec.envdCredential !== "host") await runner.initEnvd(l, { accessToken: rec.envdToken }, rec.envdToken);
      if (!l.slot) throw new Error("sandbox lost its network slot while restoring");
      const bytes = await captureLayer(l.slot.slotIp, envdTokenOf(rec), layer, maxLayerBytes(rec));
      await runner.stopRuntime(l);
      this.ctx.log.info({ sandboxID: rec.id, bytes }, "filesystem taken from the memory image; rebooting");
      await this.bootWithLayer(l, layer);
      undo.release();
    } catch (err) {
      await undo.unwind();
      throw new StartFailedError(`failed to boot sandbox '${rec.id}' from its filesystem: ${(err as Error).message}`);
    } finally {
      rmSync(layer, { recursive: true, force: true });
    }
  }

  /**
   * A resume from a filesystem-only pause: the same sandbox (ID, token, env) boots from its
   * template tree, envd applies the kept layer before anything else runs, then the template's
   * start command runs as at a cold create. Also a fork's child without memory.
   */
  async bootWithLayer(l: Live, layer: string): Promise<void> {
    const { rec } = l;
    const tpl = rec.boot ? undefined : this.ctx.templates.get(rec.templateId);
    const boot = rec.boot ?? (tpl && bootSettings(tpl));
    await this.ctx.runner.bring(
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
    const stats = await applyLayer(l.slot.slotIp, envdTokenOf(rec), layer);
    this.ctx.log.info({ sandboxID: rec.id, ...stats, layerBytes: layerBytes(layer) }, "filesystem layer applied");
    if (boot?.startCmd) await runStartCommand(l.slot.slotIp, boot, envdTokenOf(rec));
  }

  /**
   * For a fork of a paused sandbox: its pause image (rebuilt from the repository if this
   * node's copy is gone), hard-linked into `dest`. Called in the sandbox's op queue, so no
   * resume renames the image meanwhile; afterwards the links hold the files whatever happens
   * to the parent. The parent stays paused and unclaimed.
   */
  async linkImage(l: Live, dest: string): Promise<void> {
    const rec = l.rec;
    if (rec.pause?.kind === "filesystem") {
      throw new ConflictError(`sandbox '${rec.id}' is paused (filesystem only): resume it to fork it`);
    }
    // Paused in place and its image skipped for a resume that then failed: written now.
    if (rec.pause?.imagePending && l.suspended) await this.writeImage(l, 0);
    const image = rec.pause?.imageDir ?? pauseDir(this.ctx.paths, rec.dir, "memory");
    if (!this.ctx.runner.driver.isCompleteCheckpoint(image)) await this.uses.commits.rebuild(rec.id, image);
    linkTree(image, dest);
  }

  /** Once every pause answered before its image was written has it (their queued operation). */
  async imagesWritten(): Promise<void> {
    // Those still in their delay are written now.
    for (const write of [...this.delayed.values()]) write();
    await Promise.all(
      this.ctx.registry
        .all()
        .filter((l) => l.rec.pause?.imagePending)
        .map((l) => l.op),
    );
  }
}
