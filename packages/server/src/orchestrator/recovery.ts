import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, rmSync } from "node:fs";
import type { StateStore } from "../state/store.js";
import { pauseClaimName, pauseManifestId } from "../storage/repository/manifest-kinds.js";
import { commitDirAsync } from "../util/fsync.js";
import { isCompleteLayer } from "./fs-layer.js";
import type { NodeContext } from "./node-context.js";
import type { PauseCommits } from "./pause-commits.js";
import { isCompletePause, pauseDir } from "./pause-kinds.js";
import type { Snapshots } from "./snapshots.js";

export interface RecoveryReport {
  /** Running sandboxes that survived the restart and were taken over again. */
  adopted: string[];
  /** Paused sandboxes still resumable. */
  paused: string[];
  /** Paused here before, resumed by another node of the cluster since: local copies dropped. */
  movedAway: string[];
  /** Sandboxes that were lost (died with or before the server) and were cleaned up. */
  cleanedUp: string[];
  orphanedRuntime: string[];
}

/**
 * After a restart: running sandboxes whose runtime sandbox and network slot survived are
 * taken over again; paused ones stay resumable; everything else is cleaned up. Returns the
 * slots to keep when the network pool is reset.
 */
export async function recover(
  ctx: NodeContext,
  uses: {
    /** Read for the records left by the last run; every write goes through `ctx.states`. */
    store: StateStore;
    pauseCommits: PauseCommits;
    snapshots: Snapshots;
  },
): Promise<{ report: RecoveryReport; keepSlots: number[] }> {
  const { registry, runner, states, log } = ctx;
  const { store } = uses;
  /** This node's ID when it is part of a cluster. */
  const nodeId = ctx.cfg.cluster?.nodeId;
  const driver = runner.driver;
  const report: RecoveryReport = { adopted: [], paused: [], movedAway: [], cleanedUp: [], orphanedRuntime: [] };
  const keepSlots: number[] = [];
  const running = new Set(await driver.list({ runningOnly: true }));
  const known = new Set<string>();
  for (const rec of store.all()) {
    known.add(rec.id);
    if (rec.state === "paused" && nodeId) {
      const holder = await ctx.repository.claimHolder(pauseClaimName(rec)).catch(() => undefined);
      if (holder && holder !== nodeId) {
        // Resumed elsewhere while this node was down: it is not ours to route or resume.
        log.info({ sandboxID: rec.id, holder }, "paused sandbox was resumed on another node; local copy dropped");
        rmSync(rec.dir, { recursive: true, force: true });
        states.forget(rec.id);
        report.movedAway.push(rec.id);
        continue;
      }
    }
    const finalImage = ctx.paths.pauseImage(rec.dir);
    const finalLayer = ctx.paths.fsLayer(rec.dir);
    if (rec.state === "paused" && rec.pause.imagePending) {
      // Paused (answered) but its image not yet written when the server stopped: the runtime
      // still holds it, stopped in place, so the image is written now.
      if (!driver.isCompleteCheckpoint(finalImage) && running.has(rec.runtimeId)) {
        const tmp = `${finalImage}.tmp`;
        try {
          await runner.checkpointInto(rec.runtimeId, tmp);
          await commitDirAsync(tmp, finalImage);
        } catch (err) {
          log.warn({ err, sandboxID: rec.id }, "pause image of a stopped-in-place sandbox not written");
        } finally {
          rmSync(tmp, { recursive: true, force: true });
        }
      }
      if (driver.isCompleteCheckpoint(finalImage)) {
        await driver.destroy(rec.runtimeId);
        rec.slotIndex = null;
        states.imageWritten(rec, finalImage, driver.checkpointBytes(finalImage));
        log.info({ sandboxID: rec.id }, "pause image written after the restart");
      }
    }
    const committed =
      rec.state === "paused" ? await ctx.repository.get(pauseManifestId(rec.id)).catch(() => undefined) : undefined;
    if (rec.state === "paused" && (isCompletePause(driver, rec.pause.kind, rec.pause.imageDir) || committed)) {
      // A lost local image is rebuilt from the repository on resume.
      const imageDir = rec.pause.imageDir ?? pauseDir(ctx.paths, rec.dir, rec.pause.kind);
      states.imageAt(rec, imageDir);
      registry.add({ rec, op: Promise.resolve() });
      report.paused.push(rec.id);
      if (committed) ctx.repository.pinManifest(committed);
      else uses.pauseCommits.commitLater(rec, imageDir);
      continue;
    }
    const slot =
      rec.state === "running" && running.has(rec.runtimeId) && rec.slotIndex !== null && ctx.slots.exists(rec.slotIndex)
        ? ctx.slots.describe(rec.slotIndex)
        : undefined;
    // A sandbox hibernated when the previous server stopped is frozen: thawed to be adopted.
    if (slot) await driver.freezer?.thaw(rec.runtimeId).catch(() => {});
    // The server died in a pause after `runsc pause` but before recording it: still running.
    if (slot && driver.suspender?.isSuspended(rec.runtimeId))
      await driver.suspender.unsuspend(rec.runtimeId).catch(() => {});
    if (slot && (await runner.answers(slot.slotIp))) {
      registry.add({ rec, slot, op: Promise.resolve() });
      keepSlots.push(slot.index);
      report.adopted.push(rec.id);
      log.info({ sandboxID: rec.id }, "running sandbox adopted after restart");
      continue;
    }
    const pausedAs =
      rec.state !== "running"
        ? undefined
        : driver.isCompleteCheckpoint(finalImage)
          ? "memory"
          : isCompleteLayer(finalLayer)
            ? "filesystem"
            : undefined;
    if (pausedAs) {
      // Died between committing its pause image (or layer) and recording it: it is paused.
      await driver.destroy(rec.runtimeId);
      rec.slotIndex = null;
      states.paused(rec, Math.max(0, rec.endAt - Date.now()), {
        imageDir: pausedAs === "memory" ? finalImage : finalLayer,
        kind: pausedAs,
        tag: randomBytes(6).toString("hex"),
        bytes: undefined,
      });
      registry.add({ rec, op: Promise.resolve() });
      report.paused.push(rec.id);
      continue;
    }
    log.warn({ sandboxID: rec.id, state: rec.state }, "sandbox did not survive the server restart; cleaning up");
    await driver.destroy(rec.runtimeId);
    rmSync(rec.dir, { recursive: true, force: true });
    states.forget(rec.id);
    report.cleanedUp.push(rec.id);
  }
  const liveRuntime = new Set(
    registry
      .all()
      .filter((l) => l.rec.state === "running")
      .map((l) => l.rec.runtimeId),
  );
  for (const id of await driver.list()) {
    if (liveRuntime.has(id)) continue;
    if (!known.has(id.slice(0, 21))) report.orphanedRuntime.push(id);
    log.warn({ sandboxID: id }, "runtime sandbox without a live record; destroying");
    await driver.destroy(id);
  }
  // Sandbox folders nobody owns, and transient fork captures, go.
  const sdir = ctx.paths.sandboxes;
  if (existsSync(sdir)) {
    for (const name of readdirSync(sdir)) {
      if (!registry.has(name)) rmSync(ctx.paths.sandbox(name), { recursive: true, force: true });
    }
  }
  rmSync(ctx.paths.forks, { recursive: true, force: true });
  await uses.snapshots.recover();
  return { report, keepSlots };
}
