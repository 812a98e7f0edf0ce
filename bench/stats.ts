/** Small statistics helpers for the benchmark: percentiles by linear interpolation. */

export interface Summary {
  n: number;
  min: number;
  p50: number;
  p95: number;
  mean: number;
  max: number;
}

/** The q-th percentile (0..100) of samples, linear interpolation between closest ranks. */
export function percentile(samples: readonly number[], q: number): number {
  if (samples.length === 0) return Number.NaN;
  const s = [...samples].sort((a, b) => a - b);
  const pos = ((s.length - 1) * Math.min(100, Math.max(0, q))) / 100;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = s[lo] as number;
  const b = s[hi] as number;
  return a + (b - a) * (pos - lo);
}

export function mean(samples: readonly number[]): number {
  if (samples.length === 0) return Number.NaN;
  return samples.reduce((x, y) => x + y, 0) / samples.length;
}

export function summarize(samples: readonly number[]): Summary {
  return {
    n: samples.length,
    min: samples.length ? Math.min(...samples) : Number.NaN,
    p50: percentile(samples, 50),
    p95: percentile(samples, 95),
    mean: mean(samples),
    max: samples.length ? Math.max(...samples) : Number.NaN,
  };
}

/** Milliseconds elapsed while fn runs. */
export async function timeMs<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = process.hrtime.bigint();
  const value = await fn();
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, value };
}

/** MB/s (10^6 bytes per second) for bytes moved in ms. */
export function mbps(bytes: number, ms: number): number {
  return bytes / 1e6 / (ms / 1000);
}
