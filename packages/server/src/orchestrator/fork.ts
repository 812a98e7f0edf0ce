import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { AenvError, AtCapacityError, ChildFailedError, ConflictError } from "@aenv/edge/errors";
import { newSandboxId } from "../state/ids.js";
import type { SandboxRecord, SnapshotRecord } from "../state/store.js";
import { linkTree } from "../util/link-tree.js";
import { envdTokenOf } from "./envd-credentials.js";
import { captureLayer, isCompleteLayer } from "./fs-layer.js";
import type { NodeContext } from "./node-context.js";
import { maxLayerBytes } from "./pause-kinds.js";
import type { PauseResume } from "./pause-resume.js";
import { clampTimeoutS, newSandboxRecord } from "./records.js";
import type { Live } from "./registry.js";
import type { Snapshots } from "./snapshots.js";
import { admitForStart, deferRuntime } from "./start-undo.js";

/** One child as the node sees it: its record, or why it did not start (the API answers it as a ForkResult). */
export type ForkChild = { sandbox: SandboxRecord } | { error: Error };

/**
 * Children restored at once. The runner's start semaphore (sandbox.start_concurrency, 8 per
 * core) is what bounds CPU contention; a restore also waits on runsc's own process start-up
 * and I/O, so overlapping them beats one per core (fork x16 here: 3.9 s with 2 at a time).
 */
const FORK_PARALLELISM = 64;

export interface ForkOptions {
  /** A cluster gateway's ask: children that do not fit here come back as a snapshot to start elsewhere. */
  spill?: boolean;
  /**
   * false: only the parent's writable filesystem is taken (it keeps running, never paused);
   * each child boots its template afresh with that layer and runs the start command.
   */
  memory?: boolean;
  /**
   * An omitted timeout is the server's default sandbox timeout (E2B's v2 fork), not what the
   * parent has left (v1, as aenv always answered it).
   */
  defaultTimeout?: boolean;
}

/** Children frozen until their siblings are up, and how many have not finished starting. */
interface Held {
  frozen: Live[];
  pending: number;
}

export interface ForkOutcome {
  children: ForkChild[];
  /**
   * With `spill`, when some children found this node full: the capture they were to start
   * from, published as a snapshot, so they can start on other nodes (a cluster gateway does).
   */
  spillSnapshot?: SnapshotRecord;
}

/**
 * One capture of the running parent (it pauses only for that), then N children restored from
 * it in parallel, each with its own ID, slot and envd token. A paused parent (memory kept) is
 * not captured again: its children restore from its pause image and it stays paused, so a
 * prepared sandbox can be paused once and forked over and over at no cost to it. A failed
 * child is fully removed; the capture is deleted afterwards.
 */
export class Forker {
  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: {
      /** Makes the fork's capture a snapshot (when children did not fit here). */
      snapshots: Pick<Snapshots, "publish">;
      /** A paused parent's image, linked into the capture folder; a fresh boot with a layer applied. */
      pauses: Pick<PauseResume, "linkImage" | "bootWithLayer">;
    },
  ) {}

  async fork(id: string, count: number, timeoutS: number | undefined, opts: ForkOptions = {}): Promise<ForkOutcome> {
    const { registry, runner } = this.ctx;
    const l = registry.mustGet(id);
    const parent = l.rec;
    const memory = opts.memory !== false;
    // A layer cannot start elsewhere as a snapshot: those children are answered here.
    const spill = !!opts.spill && memory;
    const captureDir = this.ctx.paths.fork(randomBytes(8).toString("hex"));
    // The parent's time left: what its children get unless the call says otherwise.
    const leftMs = await registry.enqueue(l, async () => {
      if (!memory) return this.captureFilesystem(l, captureDir);
      if (parent.state === "paused") {
        await this.uses.pauses.linkImage(l, captureDir);
        // Saved by hibernation, it is running to its client: its TTL is endAt.
        return parent.pause.idleSaved ? parent.endAt - Date.now() : (parent.pause.ttlLeftMs ?? 0);
      }
      if (parent.state !== "running") throw new ConflictError(`sandbox '${id}' is not running`);
      await runner.capture(l, captureDir, { shared: true });
      return parent.endAt - Date.now();
    });
    const ttlS =
      timeoutS ?? (opts.defaultTimeout ? this.ctx.cfg.defaultTimeoutS : Math.max(1, Math.ceil(leftMs / 1000)));
    const results: ForkChild[] = new Array(count);
    const held: Held = { frozen: [], pending: count };
    // Children up first are frozen until the last one is: an idle restored sentry still spins
    // (systrap), taking the CPU its siblings' restores need (fork x16 here, until every child
    // answered, median of 5-7 runs: 16.2 -> 13.7 s; x4 3.8-4.2 -> 3.4-3.9 s).
    const holding = count > 1 && memory ? held : undefined;
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < count; i = next++) {
        results[i] = await this.child(parent, captureDir, ttlS, memory, holding).then(
          (sandbox) => ({ sandbox }),
          (err: unknown) => ({ error: err instanceof Error ? err : new Error(String(err)) }),
        );
        held.pending--;
      }
    };
    let spillSnapshot: SnapshotRecord | undefined;
    try {
      await Promise.all(Array.from({ length: Math.min(FORK_PARALLELISM, count) }, worker));
      if (spill && results.some((r) => "error" in r && r.error instanceof AtCapacityError)) {
        spillSnapshot = await this.uses.snapshots.publish(parent, undefined, captureDir);
      }
    } finally {
      rmSync(captureDir, { recursive: true, force: true });
      await Promise.all(held.frozen.map((c) => registry.wake(c).catch(() => {})));
    }
    return { children: results, ...(spillSnapshot ? { spillSnapshot } : {}) };
  }

  /**
   * The parent's writable filesystem as a layer in `dest`, for children that boot without its
   * memory; returns its time left. A running parent goes on meanwhile (what it writes during
   * the stream may or may not be in it, as after a crash); a filesystem-only pause is its
   * layer already. A pause with memory holds its filesystem inside the checkpoint: forked
   * from that with memory, or resumed first.
   */
  private async captureFilesystem(l: Live, dest: string): Promise<number> {
    const parent = l.rec;
    if (parent.state === "paused") {
      if (parent.pause.kind !== "filesystem") {
        throw new ConflictError(
          `sandbox '${parent.id}' is paused with its memory: fork it with memory, or resume it first`,
        );
      }
      // Its layer may live only in the repository (moved from a node that is gone).
      const layer = parent.pause.imageDir;
      if (!layer || !isCompleteLayer(layer)) {
        throw new ConflictError(`sandbox '${parent.id}' has no filesystem layer on this node: resume it first`);
      }
      linkTree(layer, dest);
      return parent.pause.ttlLeftMs ?? 0;
    }
    if (parent.state !== "running" || !l.slot) throw new ConflictError(`sandbox '${parent.id}' is not running`);
    await captureLayer(l.slot.slotIp, envdTokenOf(parent), dest, maxLayerBytes(parent));
    return parent.endAt - Date.now();
  }

  /** Frozen as hibernation does (any traffic or operation thaws it) until its siblings are up. */
  private async hold(live: Live, held: Held): Promise<void> {
    const driver = this.ctx.runner.driver;
    // The last one up is not held: nothing is left to wait for.
    const freezer = driver.freezer;
    if (!freezer || held.pending <= 1) return;
    live.hibernated = true;
    held.frozen.push(live);
    await freezer.freeze(live.rec.runtimeId).catch(() => {
      live.hibernated = false;
    });
  }

  private async child(
    parent: SandboxRecord,
    imageDir: string,
    ttlS: number,
    memory: boolean,
    hold?: Held,
  ): Promise<SandboxRecord> {
    const { registry, runner } = this.ctx;
    registry.assertOpen();
    // The sizing is the parent's: fail before building a record if it cannot fit.
    registry.checkRoom(parent);
    const id = newSandboxId();
    const rec = newSandboxRecord(this.ctx.cfg, {
      id,
      dir: this.ctx.paths.sandbox(id),
      templateId: parent.templateId,
      alias: parent.alias,
      rootfs: parent.rootfs,
      runtimeDir: parent.runtimeDir,
      req: {
        templateID: parent.templateId,
        timeoutS: ttlS,
        metadata: { ...parent.metadata },
        envVars: { ...parent.envVars },
        allowInternetAccess: parent.allowInternet,
        ...(parent.network ? { network: parent.network } : {}),
        autoPause: parent.autoPause,
        autoResume: parent.autoResume,
        autoPauseMemory: parent.autoPauseMemory,
      },
      sizing: parent,
    });
    // Children share the parent's live volumes: a capture restores only with the same mounts,
    // and a volume is one folder on the node, not something a fork could copy on write.
    if (parent.volumeMounts?.length) rec.volumeMounts = parent.volumeMounts.map((m) => ({ ...m }));
    if (parent.boot) rec.boot = parent.boot;
    // A child is its parent's key's, whoever forked it (the key itself or the operator).
    if (parent.owner) rec.owner = parent.owner;
    const live: Live = { rec, op: Promise.resolve() };
    const undo = admitForStart(this.ctx, live);
    deferRuntime(undo, this.ctx, live);
    try {
      if (memory) {
        await runner.bring(
          live,
          { kind: "image", imageDir, oldToken: envdTokenOf(parent) },
          { accessToken: rec.envdToken },
        );
      } else await this.uses.pauses.bootWithLayer(live, imageDir);
      this.ctx.states.started(rec, Date.now() + clampTimeoutS(this.ctx.cfg, ttlS) * 1000);
      this.ctx.events.emit("created", rec);
      this.ctx.events.emit("forked", rec, { parentId: parent.id });
      if (hold) await this.hold(live, hold);
      undo.release();
      return rec;
    } catch (err) {
      await undo.unwind();
      if (err instanceof AenvError) throw err;
      throw new ChildFailedError(`fork child failed to start: ${(err as Error).message}`);
    }
  }
}
