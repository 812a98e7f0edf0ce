import { ForbiddenError, NotFoundError, PausedError } from "@aenv/edge/errors";
import { owns, type Requester } from "@aenv/edge/tenants";
import type { NodePaths } from "../node-paths.js";
import { trafficTokenProblem } from "../proxy/traffic-token.js";
import type { RuntimeDriver } from "../runtime/driver.js";
import type { PauseKind, SandboxRecord } from "../state/store.js";
import { isCompleteLayer } from "./fs-layer.js";

// What a pause is, for every module that meets one: where it keeps what it keeps, whether
// that is whole, and what traffic may do to it.

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
export function autoResumable(rec: Pick<SandboxRecord, "autoResume" | "pause">): boolean {
  // Saved by hibernation: running as far as its client knows, so any use brings it back.
  if (rec.pause?.idleSaved) return true;
  return rec.autoResume && rec.pause?.kind !== "filesystem";
}

/** What traffic to a paused sandbox it will not resume gets. */
export function pausedError(rec: Pick<SandboxRecord, "id" | "pause">): PausedError {
  return new PausedError(
    rec.pause?.kind === "filesystem"
      ? `sandbox '${rec.id}' is paused (filesystem only); resume it with connect`
      : `sandbox '${rec.id}' is paused; resume it (connect) or create it with autoResume`,
  );
}

/** How a resume was asked for: by a client (nothing set), or for traffic a gateway passed on. */
export interface ResumeOptions {
  /** Only if the sandbox resumes on traffic (autoResume, or saved by hibernation). */
  auto?: boolean;
  /** The traffic's port and the traffic token it carried: checked before anything is resumed. */
  traffic?: { port: number; token?: string };
  /** false: a pause that kept memory boots from its filesystem instead (PauseResume.reboot). */
  memory?: boolean;
  /** The API key asking: another key's sandbox is not found (checked before a takeover too). */
  requester?: Requester;
}

/**
 * Refuses a resume the caller may not make: another API key's sandbox (404, as an unknown
 * one), or traffic behind an auto-resume that may not reach it (403).
 */
export function refuseResumer(rec: Pick<SandboxRecord, "id" | "trafficToken" | "owner">, opts: ResumeOptions): void {
  if (opts.requester && !owns(opts.requester, rec.owner)) throw new NotFoundError(`sandbox '${rec.id}' not found`);
  if (!opts.traffic) return;
  const problem = trafficTokenProblem(rec.id, opts.traffic.port, opts.traffic.token, rec.trafficToken);
  if (problem) throw new ForbiddenError(problem);
}
