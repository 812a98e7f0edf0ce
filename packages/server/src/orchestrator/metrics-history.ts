import { type MetricSample, sampleMetrics } from "./metrics.js";
import type { NodeContext } from "./node-context.js";

/** A day of samples at the default interval; older ones are dropped first. */
const MAX_SAMPLES = 8640;
/** Disk usage needs a call into envd (it wakes the sandbox): refreshed at most this often. */
const DISK_EVERY_MS = 60_000;

/**
 * Metrics kept over a sandbox's life, so `getMetrics({start, end})` can answer for a range:
 * every running sandbox is sampled every `intervalS` (CPU and memory read from its cgroup,
 * no process started; sandboxes one after another, never all at once). Paused sandboxes are
 * not sampled; their history stays until they are gone.
 */
export class MetricsHistory {
  private readonly samples = new Map<string, MetricSample[]>();
  private readonly diskAt = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;

  constructor(private readonly ctx: NodeContext) {}

  start(): void {
    if (this.ctx.cfg.metricsIntervalS <= 0 || this.timer) return;
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = true;
      this.tick()
        .catch((err) => this.ctx.log.warn({ err }, "metrics sampling failed"))
        .finally(() => (this.running = false));
    }, this.ctx.cfg.metricsIntervalS * 1000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Samples in [start, end] (Unix seconds, inclusive), oldest first, plus one taken now if it falls inside. */
  async query(id: string, range: { start?: number; end?: number }): Promise<MetricSample[]> {
    const l = this.ctx.registry.mustGet(id);
    const inRange = (t: number) =>
      (range.start === undefined || t >= range.start) && (range.end === undefined || t <= range.end);
    const out = (this.samples.get(id) ?? []).filter((m) => inRange(m.timestampUnix));
    if (l.rec.state === "running" && inRange(Math.floor(Date.now() / 1000))) {
      const fresh = (await sampleMetrics(this.ctx.driver, l))[0];
      if (fresh && out.at(-1)?.timestampUnix !== fresh.timestampUnix) out.push(fresh);
    }
    return out;
  }

  /**
   * The newest sample of a sandbox clients see running (hibernated ones included), for the
   * batch metrics API; undefined for one this node does not hold, paused, or not yet started.
   * A sandbox with no sample kept yet (just started, or history off) is sampled now.
   */
  async latest(id: string): Promise<MetricSample | undefined> {
    const l = this.ctx.registry.get(id);
    if (!l || l.ephemeral) return undefined;
    const { state, pause } = l.rec;
    const running = state === "running" || (state === "paused" && pause?.idleSaved === true);
    if (!running) return undefined;
    const kept = this.samples.get(id)?.at(-1) ?? l.lastMetric;
    if (kept) return kept;
    return state === "running" ? (await sampleMetrics(this.ctx.driver, l))[0] : undefined;
  }

  forget(id: string): void {
    this.samples.delete(id);
    this.diskAt.delete(id);
  }

  private async tick(): Promise<void> {
    // Sandboxes gone by any path (killed, expired, found dead) leave no history behind.
    for (const id of this.samples.keys()) if (!this.ctx.registry.has(id)) this.forget(id);
    for (const l of this.ctx.registry.all()) {
      if (l.rec.state !== "running" || l.inflight || l.gate || l.ephemeral) continue;
      const id = l.rec.id;
      const list = this.samples.get(id) ?? [];
      const last = list.at(-1);
      const wantDisk = Date.now() - (this.diskAt.get(id) ?? 0) >= DISK_EVERY_MS;
      const m = (await sampleMetrics(this.ctx.driver, l, { disk: wantDisk || !last }))[0];
      if (!m || !this.ctx.registry.has(id)) continue;
      if (wantDisk || !last) this.diskAt.set(id, Date.now());
      else if (last) {
        m.diskUsed = last.diskUsed;
        m.diskTotal = last.diskTotal;
      }
      list.push(m);
      if (list.length > MAX_SAMPLES) list.splice(0, list.length - MAX_SAMPLES);
      this.samples.set(id, list);
    }
  }
}
