/**
 * Which gVisor platform `auto` runs: the faster one on this host, measured, and then kept for the
 * data dir. Neither platform wins everywhere. systrap is upstream's default and the faster where a
 * switch between host processes is cheap; ptrace costs more per system call, but on a guest
 * where that switch is dear (this project's 2-core VM) it forks and execs in half systrap's time,
 * which is what shell commands, a first command and a restore spend, and it does not spin while
 * idle (docs/benchmarks.md, "The gVisor platform"). So the choice is measured: a throwaway
 * sandbox per platform runs a loop of fork+exec, ptrace is taken only when clearly faster.
 *
 * Images (pauses, snapshots, warm images) restore only on the platform that wrote them, so a
 * data dir keeps the platform it first used: the record below, or, for a data dir from before
 * the record existed, systrap, which `auto` chose then wherever it worked.
 */
import { existsSync, readFileSync } from "node:fs";
import { writeFileDurableSync } from "../../util/durable-write.js";

export const PLATFORMS = ["systrap", "ptrace"] as const;

/** ptrace is chosen only when its loop took at most this share of systrap's. */
export const PTRACE_MARGIN = 0.8;

/** fork+execs in the measured loop: 0.9–1.0 s under systrap here, 0.3 s under ptrace. */
export const LOOP_FORKS = 30;

/** The shell line the measurement runs (the host's /bin/sh, in `runsc do`). */
export const LOOP = `i=0; while [ $i -lt ${LOOP_FORKS} ]; do x=$(/bin/true); i=$((i+1)); done`;

/** One platform's trial: whether a sandbox started, and how long its start and the loop took. */
export interface PlatformTrial {
  platform: string;
  ok: boolean;
  /** `runsc do /bin/true`, ms. */
  startMs?: number;
  /** `runsc do sh -c LOOP` less the start, ms. */
  loopMs?: number;
  error?: string;
}

/**
 * The platform to use from the trials, or undefined when none started. ptrace only when its
 * loop is clearly faster; a platform whose loop failed counts as slower than any that ran.
 */
export function chooseFaster(trials: PlatformTrial[]): string | undefined {
  const sys = trials.find((t) => t.platform === "systrap" && t.ok);
  const pt = trials.find((t) => t.platform === "ptrace" && t.ok);
  if (!sys) return pt?.platform;
  if (!pt || pt.loopMs === undefined) return "systrap";
  if (sys.loopMs === undefined) return "ptrace";
  return pt.loopMs <= sys.loopMs * PTRACE_MARGIN ? "ptrace" : "systrap";
}

/** The platform a data dir's images were made with, if it is recorded. */
export function recordedPlatform(file: string): string | undefined {
  try {
    const p = readFileSync(file, "utf8").trim();
    return (PLATFORMS as readonly string[]).includes(p) ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Records `platform` for the data dir; a start that finds it recorded already writes nothing. */
export function recordPlatform(file: string, platform: string): void {
  if (recordedPlatform(file) !== platform) writeFileDurableSync(file, `${platform}\n`);
}

/** Why no platform could be used, from the trials that failed. */
export function noPlatformMessage(trials: PlatformTrial[]): string {
  return `runsc cannot start a sandbox on this host (${trials.map((t) => `${t.platform}: ${t.error}`).join("; ")})`;
}

/**
 * What `auto` must use without measuring: the data dir's record; for a data dir that already
 * holds state from before the record (`stateFile` exists), what `auto` chose then (systrap, else
 * ptrace); else nothing (measure).
 */
export function pinnedPlatform(
  recordFile: string,
  stateFile: string,
): { candidates: string[]; why: string } | undefined {
  const rec = recordedPlatform(recordFile);
  if (rec) return { candidates: [rec], why: "recorded for this data dir" };
  if (existsSync(stateFile)) {
    return { candidates: [...PLATFORMS], why: "a data dir from before platforms were measured: the first that starts" };
  }
  return undefined;
}
