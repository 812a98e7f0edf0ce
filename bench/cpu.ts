/**
 * Where a stretch of the benchmark's CPU time went: the host in all, aenv-server itself, the
 * commands it ran and waited for (runsc CLIs, ip, nft: its children's CPU), this process (the
 * e2b SDK client), and the rest (sandboxes: runsc's sentries and gofers, and anything else).
 * From /proc, in seconds.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

/** Jiffies per second, the unit of /proc/stat and /proc/PID/stat. */
export const CLK_TCK = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
})();

export interface CpuMark {
  at: number;
  hostBusy: number;
  server: number;
  serverChildren: number;
  client: number;
}

export interface CpuSplit {
  wallS: number;
  /** Host CPU seconds in use (not idle or iowait); at most wallS × cores. */
  hostS: number;
  serverS: number;
  /** Commands aenv-server ran and waited for (runsc CLIs, ip, nft, ...). */
  serverCommandsS: number;
  /** The bench process: the e2b SDK client. */
  clientS: number;
  /** The rest: the sandboxes (sentry, gofer), and whatever else ran on the host. */
  sandboxesS: number;
}

/** Busy and total jiffies of the whole host (iowait counts as idle). */
export function hostTicks(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
  // cpu user nice system idle iowait irq softirq steal (guest time is already inside user)
  const v = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: total - (v[3] ?? 0) - (v[4] ?? 0), total };
}

/** utime + stime of a process, and cutime + cstime (its reaped children), in jiffies. */
function statTicks(pid: number): { own: number; reaped: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat
      .slice(stat.lastIndexOf(")") + 2)
      .split(" ")
      .map(Number);
    // f[0] is field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17.
    return { own: (f[11] ?? 0) + (f[12] ?? 0), reaped: (f[13] ?? 0) + (f[14] ?? 0) };
  } catch {
    return undefined;
  }
}

/** utime + stime of a process (and of its reaped children with `children`), in jiffies. */
export function procTicks(pid: number, children = false): number | undefined {
  const t = statTicks(pid);
  return t && t.own + (children ? t.reaped : 0);
}

export function cpuMark(serverPid: number | undefined): CpuMark {
  const s = (serverPid && statTicks(serverPid)) || { own: 0, reaped: 0 };
  const c = process.cpuUsage();
  return {
    at: performance.now(),
    hostBusy: hostTicks().busy / CLK_TCK,
    server: s.own / CLK_TCK,
    serverChildren: s.reaped / CLK_TCK,
    client: (c.user + c.system) / 1e6,
  };
}

export function cpuSince(a: CpuMark, b: CpuMark): CpuSplit {
  const hostS = b.hostBusy - a.hostBusy;
  const serverS = b.server - a.server;
  const serverCommandsS = b.serverChildren - a.serverChildren;
  const clientS = b.client - a.client;
  return {
    wallS: (b.at - a.at) / 1000,
    hostS,
    serverS,
    serverCommandsS,
    clientS,
    sandboxesS: Math.max(0, hostS - serverS - serverCommandsS - clientS),
  };
}
