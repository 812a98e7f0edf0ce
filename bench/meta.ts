/** Host and build facts every result file carries, so runs on different machines can be told apart. */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { cpus, loadavg, release } from "node:os";
import { ROOT } from "../test/helpers/server.js";
import type { Meta } from "./report.js";

export interface BenchMeta extends Meta {
  /** HEAD of the tree the bench ran from, with "-dirty" when it had uncommitted changes. */
  commit: string;
}

function sh(cmd: string, args: string[]): string | undefined {
  try {
    return execFileSync(cmd, args, { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  } catch {
    return undefined;
  }
}

function meminfoMiB(field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync("/proc/meminfo", "utf8"));
  return m ? Math.round(Number(m[1]) / 1024) : 0;
}

const load = () => loadavg().map((x) => Math.round(x * 100) / 100);

export function hostMeta(settings: Record<string, number | string>): BenchMeta {
  const head = sh("git", ["rev-parse", "HEAD"]);
  const dirty = sh("git", ["status", "--porcelain", "--untracked-files=no"]);
  const cpuList = cpus();
  return {
    date: new Date().toISOString(),
    commit: head ? `${head}${dirty ? "-dirty" : ""}` : "unknown",
    runscVersion:
      sh("runsc", ["--version"])
        ?.split("\n")[0]
        ?.replace(/^runsc version /, "") ?? "unknown",
    platform: "unknown",
    node: process.version,
    cpus: cpuList.length,
    cpuModel: cpuList[0]?.model.trim() ?? "unknown",
    memTotalMiB: meminfoMiB("MemTotal"),
    kernel: release(),
    loadAvgStart: load(),
    settings,
  };
}

/** Stamps the end of a run: duration and the load average then (other work skews timings). */
export function finishMeta(meta: BenchMeta, startedMs: number): void {
  meta.durationS = (Date.now() - startedMs) / 1000;
  meta.loadAvgEnd = load();
}

/** A positive integer (or number when `float`) from the environment, else the default. */
export function envNum(name: string, def: number, float = false): number {
  const v = Number(process.env[name]);
  if (!Number.isFinite(v) || v <= 0) return def;
  return float ? v : Math.floor(v);
}

export const benchLog = (tag: string) => (msg: string) =>
  process.stderr.write(`[bench ${tag} ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
