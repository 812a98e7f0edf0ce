/**
 * Statistics and the composite score of ComputeSDK's TTI benchmark (computesdk/benchmarks,
 * METHODOLOGY.md), reimplemented so our figures are computed the way their published ones are.
 * They differ from bench/stats.ts on purpose: the fastest and slowest 5% of samples are trimmed
 * first, and percentiles are nearest-rank (no interpolation).
 */

export interface TtiStats {
  /** Successful samples the figures come from (before trimming). */
  n: number;
  median: number;
  p95: number;
  p99: number;
  /** Of every successful sample, untrimmed: ComputeSDK shows these but does not score them. */
  min: number;
  max: number;
}

/** Nearest-rank percentile of sorted samples: the ceil(p% · n)-th smallest, 0 when empty. */
function nearestRank(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const idx = Math.max(0, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.min(idx, sorted.length - 1)] as number;
}

/**
 * Median, p95 and p99 after dropping floor(5% · n) samples at each end (when some remain),
 * plus the untrimmed min and max. All zero without samples, as theirs reports a provider with
 * no success.
 */
export function ttiStats(samples: readonly number[]): TtiStats {
  if (samples.length === 0) return { n: 0, median: 0, p95: 0, p99: 0, min: 0, max: 0 };
  const sorted = [...samples].sort((a, b) => a - b);
  const cut = Math.floor(sorted.length * 0.05);
  const kept = cut > 0 && sorted.length - 2 * cut > 0 ? sorted.slice(cut, sorted.length - cut) : sorted;
  const mid = Math.floor(kept.length / 2);
  const median =
    kept.length % 2 === 0 ? ((kept[mid - 1] as number) + (kept[mid] as number)) / 2 : (kept[mid] as number);
  return {
    n: samples.length,
    median,
    p95: nearestRank(kept, 95),
    p99: nearestRank(kept, 99),
    min: sorted[0] as number,
    max: sorted[sorted.length - 1] as number,
  };
}

/** Their weights: the median is the typical case, p95 and p99 the tails. */
export const SCORE_WEIGHTS = { median: 0.6, p95: 0.25, p99: 0.15 } as const;
/** At or above this a metric scores 0. */
export const SCORE_CEILING_MS = 10_000;

const metricScore = (ms: number) => Math.max(0, 100 * (1 - ms / SCORE_CEILING_MS));

/**
 * 0-100, higher is better: the weighted metric scores times the success rate (so 50% success
 * halves it), rounded to 2 decimals; 0 when nothing succeeded.
 */
export function compositeScore(s: TtiStats, successRate: number): number {
  if (successRate <= 0) return 0;
  const timing =
    SCORE_WEIGHTS.median * metricScore(s.median) +
    SCORE_WEIGHTS.p95 * metricScore(s.p95) +
    SCORE_WEIGHTS.p99 * metricScore(s.p99);
  return Math.round(timing * successRate * 100) / 100;
}
