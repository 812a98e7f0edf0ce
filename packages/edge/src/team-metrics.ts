import type { MaxTeamMetric, TeamMetric } from "@aenv/protocol";

/** Seconds between samples; samples sit on multiples of it, so nodes' series add up by time. */
export const TEAM_SAMPLE_S = 5;
/** A day of samples is kept. */
const KEEP_S = 86_400;

interface Sample {
  t: number;
  concurrent: number;
  startRate: number;
}

/** What a sample reads of this node's sandboxes. */
export interface TeamSandbox {
  state: string;
  /** When it last started (created or resumed), ms. */
  startedAt: number;
}

/**
 * E2B's team metrics for this node: sandboxes running, and sandboxes started per second,
 * every TEAM_SAMPLE_S seconds, a day of them in memory (gone with a restart of the server).
 * A start is a sandbox whose run began within the sample's interval, so one created and
 * killed between two samples is not counted.
 */
export class TeamMetrics {
  private readonly samples: Sample[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastMs = Date.now();

  constructor(private readonly sandboxes: () => readonly TeamSandbox[]) {}

  start(): void {
    this.timer ??= setInterval(() => this.sample(), TEAM_SAMPLE_S * 1000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** One sample now (the timer's, or a test's). */
  sample(nowMs = Date.now()): void {
    const all = this.sandboxes();
    const started = all.filter((s) => s.startedAt > this.lastMs && s.startedAt <= nowMs).length;
    const spanS = Math.max(1, (nowMs - this.lastMs) / 1000);
    this.lastMs = nowMs;
    const t = Math.floor(nowMs / 1000 / TEAM_SAMPLE_S) * TEAM_SAMPLE_S;
    const s = { t, concurrent: all.filter((x) => x.state === "running").length, startRate: started / spanS };
    if (this.samples.at(-1)?.t === t) this.samples[this.samples.length - 1] = s;
    else this.samples.push(s);
    while ((this.samples[0]?.t ?? t) < t - KEEP_S) this.samples.shift();
  }

  /** Samples within [start, end] (Unix seconds; the last hour when unset), oldest first. */
  range(startS?: number, endS?: number): TeamMetric[] {
    const end = endS ?? Math.floor(Date.now() / 1000);
    const start = startS ?? end - 3600;
    return this.samples
      .filter((s) => s.t >= start && s.t <= end)
      .map((s) => teamMetric(s.t, s.concurrent, s.startRate));
  }
}

export function teamMetric(t: number, concurrentSandboxes: number, sandboxStartRate: number): TeamMetric {
  return {
    timestamp: new Date(t * 1000).toISOString(),
    timestampUnix: t,
    concurrentSandboxes,
    sandboxStartRate: Math.round(sandboxStartRate * 1000) / 1000,
  };
}

/** The largest value of one metric over a series; zero at `end` for an empty one. */
export function maxTeamMetric(
  series: readonly TeamMetric[],
  metric: "concurrent_sandboxes" | "sandbox_start_rate",
  endS: number,
): MaxTeamMetric {
  const value = (m: TeamMetric) => (metric === "concurrent_sandboxes" ? m.concurrentSandboxes : m.sandboxStartRate);
  let best: TeamMetric | undefined;
  for (const m of series) if (!best || value(m) > value(best)) best = m;
  const t = best?.timestampUnix ?? endS;
  return { timestamp: new Date(t * 1000).toISOString(), timestampUnix: t, value: best ? value(best) : 0 };
}

/** Several nodes' series as one: values at the same sample time added up. */
export function sumTeamMetrics(parts: readonly (readonly TeamMetric[])[]): TeamMetric[] {
  const byT = new Map<number, { c: number; r: number }>();
  for (const part of parts) {
    for (const m of part) {
      const v = byT.get(m.timestampUnix) ?? { c: 0, r: 0 };
      v.c += m.concurrentSandboxes;
      v.r += m.sandboxStartRate;
      byT.set(m.timestampUnix, v);
    }
  }
  return [...byT.entries()].sort((a, b) => a[0] - b[0]).map(([t, v]) => teamMetric(t, v.c, v.r));
}
