/** GET /metrics — CPU, memory and root-disk usage from /proc and statfs. */
import { promises as fsp } from "node:fs";
import os from "node:os";
import type { EnvdMetrics } from "@aenv/protocol";

interface CpuSample {
  idle: number;
  total: number;
}

async function readCpu(): Promise<CpuSample | undefined> {
  try {
    const text = await fsp.readFile("/proc/stat", "utf8");
    const line = text.split("\n").find((l) => l.startsWith("cpu "));
    if (!line) return undefined;
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0); // idle + iowait
    const total = v.slice(0, 8).reduce((a, b) => a + (Number.isFinite(b) ? b : 0), 0); // without guest time
    return { idle, total };
  } catch {
    return undefined;
  }
}

let last: CpuSample | undefined;

async function cpuUsedPct(): Promise<number> {
  let prev = last;
  if (!prev) {
    prev = await readCpu();
    await new Promise((r) => setTimeout(r, 100));
  }
  const cur = await readCpu();
  if (cur) last = cur;
  if (!prev || !cur || cur.total <= prev.total) return 0;
  const busy = cur.total - prev.total - (cur.idle - prev.idle);
  const pct = (busy / (cur.total - prev.total)) * 100;
  return Math.round(Math.min(100, Math.max(0, pct)) * 100) / 100;
}

async function memInfo(): Promise<{ total: number; used: number; cache: number }> {
  try {
    const text = await fsp.readFile("/proc/meminfo", "utf8");
    const kb = (key: string) => {
      const m = new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(text);
      return m?.[1] ? Number(m[1]) * 1024 : undefined;
    };
    const total = kb("MemTotal") ?? os.totalmem();
    const available = kb("MemAvailable") ?? kb("MemFree") ?? os.freemem();
    const cache = (kb("Cached") ?? 0) + (kb("Buffers") ?? 0);
    return { total, used: Math.max(0, total - available), cache };
  } catch {
    return { total: os.totalmem(), used: os.totalmem() - os.freemem(), cache: 0 };
  }
}

async function disk(): Promise<{ used: number; total: number }> {
  try {
    const s = await fsp.statfs("/");
    const total = s.blocks * s.bsize;
    return { total, used: Math.max(0, (s.blocks - s.bfree) * s.bsize) };
  } catch {
    return { total: 0, used: 0 };
  }
}

export async function collectMetrics(): Promise<EnvdMetrics> {
  const [cpu, mem, d] = await Promise.all([cpuUsedPct(), memInfo(), disk()]);
  const mib = 1024 * 1024;
  return {
    ts: Math.floor(Date.now() / 1000),
    cpu_count: os.availableParallelism?.() ?? os.cpus().length,
    cpu_used_pct: cpu,
    mem_total: mem.total,
    mem_used: mem.used,
    mem_cache: mem.cache,
    mem_total_mib: Math.floor(mem.total / mib),
    mem_used_mib: Math.floor(mem.used / mib),
    disk_used: d.used,
    disk_total: d.total,
  };
}
