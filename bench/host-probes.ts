/** What a benchmark reads about processes and Redis: CPU time, RSS, command and byte counters. */
import { readFileSync } from "node:fs";
import type { Redis } from "ioredis";

/** CPU time (user + system) a process has used so far, ms; NaN when it is gone. */
export function cpuMs(pid: number | undefined): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (in parentheses, which may hold spaces): utime is the 12th.
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // USER_HZ is 100 on Linux
  } catch {
    return Number.NaN;
  }
}

/** Resident memory of a process, MiB; NaN when it is gone. */
export function rssMiB(pid: number | undefined): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

export interface RedisCounters {
  /** Commands processed, by command name (INFO commandstats). */
  calls: Record<string, number>;
  totalCalls: number;
  /** Bytes in and out over the network (INFO stats). */
  bytesIn: number;
  bytesOut: number;
}

export async function redisCounters(c: Redis): Promise<RedisCounters> {
  const stats = await c.info("commandstats");
  const calls: Record<string, number> = {};
  for (const m of stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[m[1] as string] = Number(m[2]);
  const net = await c.info("stats");
  const num = (k: string) => Number(new RegExp(`^${k}:(\\d+)`, "m").exec(net)?.[1] ?? 0);
  return {
    calls,
    totalCalls: Object.values(calls).reduce((a, b) => a + b, 0),
    bytesIn: num("total_net_input_bytes"),
    bytesOut: num("total_net_output_bytes"),
  };
}

/** What happened between two readings; INFO's own calls (one each) are not subtracted. */
export function redisDelta(a: RedisCounters, b: RedisCounters): RedisCounters {
  const calls: Record<string, number> = {};
  for (const [k, v] of Object.entries(b.calls)) {
    const d = v - (a.calls[k] ?? 0);
    if (d > 0) calls[k] = d;
  }
  return {
    calls,
    totalCalls: b.totalCalls - a.totalCalls,
    bytesIn: b.bytesIn - a.bytesIn,
    bytesOut: b.bytesOut - a.bytesOut,
  };
}
