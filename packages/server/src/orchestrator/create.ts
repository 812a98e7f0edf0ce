import { AenvError, StartFailedError } from "@aenv/edge/errors";
import { ownerOf } from "@aenv/edge/tenants";
import { IDEMPOTENCY } from "@aenv/protocol";
import { newSandboxId, newToken } from "../state/ids.js";
import type { SandboxRecord, SnapshotRecord } from "../state/store.js";
import type { Template } from "../state/template-catalog.js";
import type { CleanupStack } from "./cleanup-stack.js";
import { envdTokenOf } from "./envd-credentials.js";
import type { NodeContext } from "./node-context.js";
import { bootSettings, type CreateRequest, checkCreateRequest, clampTimeoutS, newSandboxRecord } from "./records.js";
import type { Live } from "./registry.js";
import type { EnvdInit, StartFrom } from "./runner.js";
import type { Snapshots } from "./snapshots.js";
import type { Sources } from "./sources.js";
import { runStartCommand } from "./start-command.js";
import { StartGate } from "./start-gate.js";
import { admitForStart, deferRuntime } from "./start-undo.js";
import { mountsForSnapshot, resolveMounts, type VolumeLookup } from "./volume-mounts.js";
import type { WarmImages } from "./warm-images.js";
import type { Pooled, WarmPool } from "./warm-pool.js";

/** A new sandbox's record, where it starts from, and envd's /init for it. */
interface Plan {
  rec: SandboxRecord;
  from: StartFrom;
  init: EnvdInit;
  /** Set when it starts from a template (a failed warm restore falls back to a boot). */
  tpl?: Template;
  /** Set when it starts from a snapshot (whose volume mount points it must have). */
  snap?: SnapshotRecord;
}

/**
 * Creating a sandbox: admission, the source its templateID names, then a restore (snapshot
 * or warm image) or a boot, envd initialised with its own token and environment.
 */
export class Creator {
  /** Creates that start a sandbox (not a pooled one) take their turn here, or are refused. */
  private readonly gate: StartGate;
  /** Creates in flight by their idempotency key. */
  private readonly byKey = new Map<string, Promise<SandboxRecord>>();

  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: {
      sources: Sources;
      snapshots: Snapshots;
      warmImages: WarmImages;
      pool?: WarmPool;
      volumes: VolumeLookup;
    },
  ) {
    this.gate = new StartGate({
      concurrency: Math.max(1, ctx.cfg.createConcurrency),
      maxWaitMs: ctx.cfg.createQueueMs,
      // A restore from a warm image on an idle 2-core host, until starts are measured.
      initialStartMs: 800,
    });
  }

  /**
   * A create with an idempotency key returns the sandbox an earlier create with that key made,
   * while it exists (running or paused), or joins that create while it is still starting; a
   * failed start frees the key. Checked and registered without an await between, so two
   * concurrent creates with one key start one sandbox. The key is in the record's metadata,
   * so it holds across a restart of the server too.
   */
  create(req: CreateRequest): Promise<SandboxRecord> {
    const key = req.metadata?.[IDEMPOTENCY.metadataKey];
    if (key === undefined) return this.createNew(req);
    const scoped = `${req.requester && !req.requester.admin ? req.requester.id : ""}/${key}`;
    const pending = this.byKey.get(scoped);
    if (pending) return pending;
    // Each API key's keys are its own: another key's sandbox is never the answer.
    const owner = req.requester ? ownerOf(req.requester).owner : undefined;
    const made = this.ctx.registry
      .all()
      .find(
        (l) =>
          l.rec.metadata[IDEMPOTENCY.metadataKey] === key &&
          l.rec.owner === owner &&
          (l.rec.state === "running" || l.rec.state === "paused"),
      );
    if (made) return Promise.resolve(made.rec);
    const p = this.createNew(req).finally(() => this.byKey.delete(scoped));
    this.byKey.set(scoped, p);
    return p;
  }

  private async createNew(req: CreateRequest): Promise<SandboxRecord> {
    const { registry } = this.ctx;
    registry.assertOpen();
    checkCreateRequest(req);
    // Fail fast on a full node; the sizing is checked (and held) once the source is known.
    registry.checkRoom();
    const timeoutS = clampTimeoutS(this.ctx.cfg, req.timeoutS);
    const plan = await this.plan(req);
    const { tpl } = plan;
    // Now with its sizing: a create that cannot fit is refused before it waits for anything.
    registry.checkRoom(plan.rec);
    // A pooled sandbox of the template: already restored, only thawed and initialised here.
    // On a miss, the one the pool is restoring right now is nearer than a restore of our own.
    const poolable = tpl && plan.from.kind === "image" && !plan.snap ? tpl : undefined;
    let pooled = poolable && this.uses.pool?.take(poolable);
    if (poolable && !pooled) pooled = await this.uses.pool?.next(poolable);
    if (pooled && pooled.live.rec.diskSizeMB !== plan.rec.diskSizeMB) {
      void this.uses.pool?.discard(pooled);
      pooled = undefined;
    }
    if (pooled) {
      const claimed = await this.claim(pooled, plan, timeoutS);
      if (claimed) return claimed;
    }
    return this.gate.run(() => this.start(req, plan, timeoutS));
  }

  /** A create that starts its sandbox: restored from a snapshot or warm image, or booted. */
  private async start(req: CreateRequest, plan: Plan, timeoutS: number): Promise<SandboxRecord> {
    const { runner, log } = this.ctx;
    const { rec, init, tpl } = plan;
    let from = plan.from;
    // Resolved and registered in one synchronous step: a volume destroy checks the registry.
    const mounts = plan.snap
      ? mountsForSnapshot(this.uses.volumes, plan.snap.id, plan.snap.volumeMounts ?? [], req.volumeMounts, rec.owner)
      : resolveMounts(this.uses.volumes, req.volumeMounts ?? [], rec.owner);
    if (mounts.length) rec.volumeMounts = mounts;
    const live: Live = { rec, op: Promise.resolve() };
    const undo = admitForStart(this.ctx, live);
    const t0 = Date.now();
    try {
      deferRuntime(undo, this.ctx, live);
      try {
        await runner.bring(live, from, init);
      } catch (err) {
        if (from.kind !== "image" || !tpl) throw err;
        // A stale warm image must not make the template unusable: boot instead.
        log.warn({ err, template: tpl.id }, "warm restore failed; cold-booting");
        this.uses.warmImages.drop(tpl);
        await runner.stopRuntime(live);
        from = { kind: "boot" };
        await runner.bring(live, from, init);
      }
      // A cold boot has to start what a warm image already runs.
      if (from.kind === "boot" && tpl?.startCmd && live.slot) {
        await runStartCommand(live.slot.slotIp, tpl, envdTokenOf(rec));
      }
      this.ctx.states.started(rec, Date.now() + timeoutS * 1000);
      log.info(
        { sandboxID: rec.id, template: rec.templateId, from: from.kind, ms: Date.now() - t0 },
        "sandbox created",
      );
      this.ctx.events.emit("created", rec);
      // The next create from this template should be a restore.
      if (tpl?.warm && from.kind === "boot" && !req.cold) this.uses.warmImages.ensureInBackground(tpl);
      undo.release();
      return rec;
    } catch (err) {
      log.error({ err, sandboxID: rec.id }, "sandbox create failed");
      await undo.unwind();
      if (err instanceof AenvError) throw err;
      throw new StartFailedError(`failed to start sandbox: ${(err as Error).message}`);
    }
  }

  /** A create served by a pooled sandbox; undefined (and the pooled one gone) if it failed. */
  private async claim(pooled: Pooled, plan: Plan, timeoutS: number): Promise<SandboxRecord | undefined> {
    const { registry, runner, log } = this.ctx;
    const t0 = Date.now();
    const rec = { ...plan.rec };
    const from = pooled.live.rec;
    rec.id = from.id;
    rec.dir = from.dir;
    rec.runtimeId = from.runtimeId;
    rec.slotIndex = from.slotIndex;
    const live: Live = { rec, op: Promise.resolve(), hibernated: pooled.live.hibernated === true };
    if (pooled.live.slot) live.slot = pooled.live.slot;
    let undo: CleanupStack;
    try {
      // Admission as for any create (its share is held from here); a full node keeps no pooled one.
      undo = admitForStart(this.ctx, live);
    } catch (err) {
      void this.uses.pool?.discard(pooled);
      throw err;
    }
    // Admitted, the pooled sandbox's runtime is this create's to remove if the claim fails.
    deferRuntime(undo, this.ctx, live);
    try {
      // Restored at the lowest CPU priority (it was background work): now someone waits for it.
      await runner.driver.prioritize(rec.runtimeId);
      await registry.wake(live);
      // Independent (the policy is the host's, /init is envd's) and the sandbox is nobody's
      // until both are done: side by side. Both settle before a failure removes it.
      const steps = await Promise.allSettled([runner.applyNetwork(live), runner.initEnvd(live, plan.init, undefined)]);
      for (const s of steps) if (s.status === "rejected") throw s.reason;
      this.ctx.states.started(rec, Date.now() + timeoutS * 1000);
      log.info({ sandboxID: rec.id, template: rec.templateId, from: "pool", ms: Date.now() - t0 }, "sandbox created");
      this.ctx.events.emit("created", rec);
      undo.release();
      return rec;
    } catch (err) {
      log.warn({ err, sandboxID: rec.id }, "pooled sandbox failed; starting another way");
      await undo.unwind();
      return undefined;
    }
  }

  private async plan(req: CreateRequest): Promise<Plan> {
    const id = newSandboxId();
    const dir = this.ctx.paths.sandbox(id);
    const source = await this.uses.sources.resolve(req.templateID, req.requester);
    if (source.kind === "snapshot") {
      const { snap } = source;
      await this.uses.snapshots.ensureLocal(snap);
      const rec = newSandboxRecord(this.ctx.cfg, {
        id,
        dir,
        templateId: snap.id,
        alias: snap.names[0] ?? snap.id,
        rootfs: snap.rootfs,
        // Same checkpoint key means the same /.aenv contents: use this node's copy of them.
        runtimeDir: snap.imageKey ? this.ctx.runtimeDir : snap.runtimeDir,
        req,
        sizing: snap,
      });
      rec.envVars = { ...snap.envVars, ...req.envVars };
      // The snapshot's network settings are the default of what starts from it.
      if (!req.network && snap.network) {
        rec.network = snap.network;
        if (snap.network.allowPublicTraffic === false) rec.trafficToken = newToken();
      }
      if (req.allowInternetAccess === undefined && snap.allowInternet !== undefined) {
        rec.allowInternet = snap.allowInternet;
      }
      if (snap.boot) rec.boot = snap.boot;
      return {
        rec,
        snap,
        from: { kind: "image", imageDir: snap.imageDir, oldToken: snap.envdToken },
        init: { accessToken: rec.envdToken, envVars: rec.envVars },
      };
    }
    const { tpl } = source;
    const sizing = {
      cpuCount: req.cpuCount ?? tpl.cpuCount,
      memoryMB: req.memoryMB ?? tpl.memoryMB,
      diskSizeMB: req.diskSizeMB ?? tpl.diskSizeMB,
    };
    const rec = newSandboxRecord(this.ctx.cfg, {
      id,
      dir,
      templateId: tpl.id,
      alias: tpl.name,
      rootfs: tpl.rootfs,
      runtimeDir: this.ctx.runtimeDir,
      req,
      sizing,
    });
    rec.boot = bootSettings(tpl);
    // A warm image carries the template's sizing and no volumes: other sizes, and sandboxes
    // with volumes, boot (gVisor restores a checkpoint's own mount table and ignores new mounts).
    const warmFits = sizing.cpuCount === tpl.cpuCount && sizing.memoryMB === tpl.memoryMB && !req.volumeMounts?.length;
    const warm = !req.cold && warmFits ? this.uses.warmImages.take(tpl) : undefined;
    return {
      rec,
      tpl,
      from: warm ? { kind: "image", imageDir: warm } : { kind: "boot" },
      init: {
        accessToken: rec.envdToken,
        envVars: { ...tpl.env, ...rec.envVars },
        defaultUser: tpl.user,
        defaultWorkdir: tpl.workdir,
      },
    };
  }
}
