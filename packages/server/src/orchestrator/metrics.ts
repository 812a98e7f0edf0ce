import type { EnvdMetrics, SandboxMetric } from "@aenv/protocol";
import type { Slot } from "../network/slots.js";
import type { RuntimeDriver } from "../runtime/driver.js";
import type { SandboxRecord } from "../state/store.js";
import { envdRequest } from "./envd-client.js";
import { envdTokenOf } from "./envd-credentials.js";

/** A sample as the orchestrator takes it; the API adds the ISO `timestamp`. */
export type MetricSample = Omit<SandboxMetric, "timestamp">;

/** What sampling reads of a sandbox this node holds (registry.ts's Live has it all). */
export interface Sampled {
  rec: SandboxRecord;
  slot?: Pick<Slot, "slotIp">;
  hibernated?: boolean;
  /** Kept here while it runs, served while it is hibernated. */
  lastMetric?: MetricSample;
}

/** One sample now: CPU and memory from the runtime, disk from envd (best effort). */
export async function sampleMetrics(
  driver: RuntimeDriver,
  l: Sampled,
  opts: { disk: boolean } = { disk: true },
): Promise<MetricSample[]> {
  const rec = l.rec;
  // A frozen sandbox cannot be asked (envd would wait for it) and uses no CPU.
  if (l.hibernated) {
    const at = Math.floor(Date.now() / 1000);
    const last = l.lastMetric ?? {
      timestampUnix: at,
      cpuCount: rec.cpuCount,
      cpuUsedPct: 0,
      memUsed: 0,
      memTotal: rec.memoryMB * 1024 * 1024,
      memCache: 0,
      diskUsed: 0,
      diskTotal: rec.diskSizeMB * 1024 * 1024,
    };
    return [{ ...last, timestampUnix: at, cpuUsedPct: 0 }];
  }
  const stats = rec.state === "running" ? await driver.stats(rec.runtimeId) : undefined;
  let diskUsed = 0;
  let diskTotal = rec.diskSizeMB * 1024 * 1024;
  if (opts.disk && l.slot && rec.state === "running") {
    try {
      const r = await envdRequest(l.slot.slotIp, "GET", "/metrics", { token: envdTokenOf(rec), timeoutMs: 2000 });
      if (r.status === 200) {
        const m = JSON.parse(r.body) as Partial<EnvdMetrics>;
        diskUsed = m.disk_used ?? 0;
        diskTotal = m.disk_total ?? diskTotal;
      }
    } catch {
      // Metrics are best effort.
    }
  }
  const sample: MetricSample = {
    timestampUnix: Math.floor(Date.now() / 1000),
    cpuCount: rec.cpuCount,
    cpuUsedPct: Math.round((stats?.cpuUsedPct ?? 0) * 100) / 100,
    memUsed: stats?.memUsedBytes ?? 0,
    memTotal: rec.memoryMB * 1024 * 1024,
    memCache: stats?.memCacheBytes ?? 0,
    diskUsed,
    diskTotal,
  };
  if (rec.state === "running") l.lastMetric = sample;
  return [sample];
}

/**
 * CPU time the sandbox's own processes have used (ms), as envd accounts it; undefined when it
 * is not running or envd does not answer within a second.
 */
export async function guestCpuMs(l: Sampled): Promise<number | undefined> {
  if (!l.slot || l.hibernated || l.rec.state !== "running") return undefined;
  const r = await envdRequest(l.slot.slotIp, "GET", "/metrics", { token: envdTokenOf(l.rec), timeoutMs: 1000 });
  if (r.status !== 200) return undefined;
  const ms = (JSON.parse(r.body) as Partial<EnvdMetrics>).cpu_time_ms;
  return typeof ms === "number" && Number.isFinite(ms) ? ms : undefined;
}
