/**
 * The TTI benchmark's results (bench/tti.ts): per mode, ComputeSDK's figures for aenv; raw
 * runsc beside them; ComputeSDK's published medians for context. Markdown that also reads as
 * plain text.
 */
import type { BenchMeta } from "./meta.js";
import { metaLines } from "./report.js";
import type { FailureKind, Iteration, Step } from "./tti-iteration.js";
import { compositeScore, type TtiStats, ttiStats } from "./tti-stats.js";

export const MODES = ["sequential", "staggered", "burst"] as const;
export type Mode = (typeof MODES)[number];

/**
 * ComputeSDK's published medians in seconds, rounded, from their repository's
 * results/<mode>_tti/latest.json of the 2026-05-05 run (100 sandboxes per mode). Their runner
 * reaches every provider over the internet; context, not a like-for-like comparison.
 */
export const PUBLISHED = {
  source: "computesdk/benchmarks results/{sequential,staggered,burst}_tti/latest.json, run of 2026-05-05",
  providers: ["Daytona", "E2B", "Vercel", "Modal"],
  medianS: {
    sequential: [0.19, 0.49, 0.67, 1.72],
    staggered: [0.21, 0.45, 0.64, 1.71],
    burst: [0.37, 0.82, 0.83, 2.26],
  },
} as const satisfies { source: string; providers: readonly string[]; medianS: Record<Mode, readonly number[]> };

export interface ModeResult {
  mode: Mode;
  /** Iterations (sequential) or launches (staggered, burst). */
  n: number;
  staggerDelayMs?: number;
  ok: number;
  failed: number;
  successRate: number;
  /** ComputeSDK's figures over the successful iterations. */
  tti: TtiStats;
  compositeScore: number;
  /** Each timed step over the iterations that completed it, failed ones included (a create is timed even when node is missing). */
  createMs: TtiStats;
  probeMs: TtiStats;
  nodeMs: TtiStats;
  failures: Record<FailureKind, number>;
  failedAt: Record<Step, number>;
  /** Iterations whose identity repeated ≥ 3 strong signals of an earlier one (informational, as theirs). */
  reuseSuspected: number;
  /** Staggered and burst: first launch → last iteration done; and the fastest TTI, as theirs names it. */
  wallClockMs?: number;
  timeToFirstReadyMs?: number;
  /** destroy() calls that failed or timed out, and sandboxes the server still listed after the mode. */
  destroyFailures: number;
  leftAfter: number;
  /** Each distinct failure message (ids and long numbers blurred) with its count, most frequent first. */
  errorMessages: { message: string; count: number }[];
  /** Every iteration in launch order (staggered: its ramp profile). */
  iterations: Iteration[];
}

export interface RawResult {
  /** What was exec'd after `run --detach`: `node -v` when the rootfs has node, else /bin/true. */
  command: string;
  n: number;
  ok: number;
  /** run --detach + exec, and each alone. */
  tti: TtiStats;
  runMs: TtiStats;
  execMs: TtiStats;
  samplesMs: number[];
  errors: string[];
}

export interface TtiReport {
  meta: BenchMeta;
  provider: { package: string; version: string; e2b: string };
  /** How the provider's traffic reaches this run's server. */
  routing: string;
  template: string;
  /** `node -v` inside the sandboxes, from the first success. */
  nodeVersion?: string;
  /** The discarded warm-up create (it starts the template's warm pool). */
  warmup?: Iteration;
  modes: ModeResult[];
  raw?: RawResult;
  published: typeof PUBLISHED;
  errors: string[];
}

const defined = (xs: (number | undefined)[]) => xs.filter((x): x is number => x !== undefined);

/** ComputeSDK's summary of a mode's iterations, plus the step split and the failure counts. */
export function summarizeMode(
  mode: Mode,
  iterations: Iteration[],
  extra: Pick<ModeResult, "staggerDelayMs" | "wallClockMs" | "destroyFailures" | "leftAfter">,
): ModeResult {
  const ok = iterations.filter((i) => !i.error);
  const tti = ttiStats(ok.map((i) => i.ttiMs));
  const successRate = iterations.length ? ok.length / iterations.length : 0;
  const failures: Record<FailureKind, number> = { http429: 0, http503: 0, timeout: 0, other: 0 };
  const failedAt: Record<Step, number> = { create: 0, probe: 0, node: 0 };
  const messages = new Map<string, number>();
  for (const i of iterations) {
    if (!i.error) continue;
    if (i.failure) failures[i.failure]++;
    if (i.failedAt) failedAt[i.failedAt]++;
    // Sandbox ids, ports and timings differ per failure: blur them so alike failures group
    // (short numbers such as an exit code or a status stay).
    const blurred = i.error.replace(/\b(?=[a-z]*\d)[a-z0-9]{16,}\b/gi, "ID").replace(/\d{4,}/g, "N");
    const key = `${i.failedAt ?? "?"}: ${blurred.slice(0, 300)}`;
    messages.set(key, (messages.get(key) ?? 0) + 1);
  }
  return {
    mode,
    n: iterations.length,
    ok: ok.length,
    failed: iterations.length - ok.length,
    successRate,
    tti,
    compositeScore: compositeScore(tti, successRate),
    createMs: ttiStats(defined(iterations.map((i) => i.createMs))),
    probeMs: ttiStats(defined(iterations.map((i) => i.probeMs))),
    nodeMs: ttiStats(defined(iterations.map((i) => i.nodeMs))),
    failures,
    failedAt,
    reuseSuspected: iterations.filter((i) => i.reuseSuspected).length,
    timeToFirstReadyMs: mode === "sequential" ? undefined : ok.length ? tti.min : 0,
    errorMessages: [...messages].map(([message, count]) => ({ message, count })).sort((a, b) => b.count - a.count),
    iterations,
    ...extra,
  };
}

const f = (v: number | undefined, d = 0) => (v === undefined || Number.isNaN(v) ? "–" : v.toFixed(d));
/** A figure of stats, "–" when they have no sample (ComputeSDK's zeros would read as 0 ms). */
const g = (s: TtiStats, k: "median" | "p95" | "p99" | "min" | "max") => (s.n ? f(s[k]) : "–");

/** A markdown table padded so it reads as plain text too; the first column left-aligned. */
function table(head: string[], body: string[][]): string {
  const w = head.map((h, i) => Math.max(h.length, ...body.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i === 0 ? c.padEnd(w[i] as number) : c.padStart(w[i] as number))).join(" | ")} |`;
  const sep = `|${w.map((n, i) => (i === 0 ? `:${"-".repeat(n + 1)}` : `${"-".repeat(n + 1)}:`)).join("|")}|`;
  return [line(head), sep, ...body.map(line)].join("\n");
}

export function markdown(r: TtiReport): string {
  const head = ["mode", "ok / n", "median", "p95", "p99", "min", "max", "score", "create", "probe", "node -v"];
  head.push("wall clock", "first ready", "fail 429/503/timeout/other");
  const body = r.modes.map((m) => [
    m.mode + (m.staggerDelayMs ? ` (${m.staggerDelayMs} ms apart)` : ""),
    `${m.ok} / ${m.n}`,
    g(m.tti, "median"),
    g(m.tti, "p95"),
    g(m.tti, "p99"),
    g(m.tti, "min"),
    g(m.tti, "max"),
    f(m.compositeScore, 2),
    g(m.createMs, "median"),
    g(m.probeMs, "median"),
    g(m.nodeMs, "median"),
    f(m.wallClockMs),
    m.ok ? f(m.timeToFirstReadyMs) : "–",
    `${m.failures.http429}/${m.failures.http503}/${m.failures.timeout}/${m.failures.other}`,
  ]);
  const raw = r.raw;
  if (raw)
    body.push([
      `raw runsc: run --detach + exec ${raw.command}`,
      `${raw.ok} / ${raw.n}`,
      g(raw.tti, "median"),
      g(raw.tti, "p95"),
      g(raw.tti, "p99"),
      g(raw.tti, "min"),
      g(raw.tti, "max"),
      "–",
      g(raw.runMs, "median"),
      "–",
      g(raw.execMs, "median"),
      "–",
      "–",
      "–",
    ]);
  const pub = r.modes.map((m) => [
    m.mode,
    m.ok ? f(m.tti.median / 1000, 2) : "–",
    ...PUBLISHED.medianS[m.mode].map((s) => f(s, 2)),
  ]);
  const lines = [
    "# aenv TTI benchmark (ComputeSDK's method, through @computesdk/e2b)",
    "",
    ...metaLines(r.meta).map((l) => `- ${l}`),
    `- commit: ${r.meta.commit}`,
    `- provider: ${r.provider.package} ${r.provider.version} (e2b ${r.provider.e2b}); ${r.routing}`,
    `- template: ${r.template}; node -v in the sandbox: ${r.nodeVersion ?? "none succeeded"}`,
    `- warm-up (discarded): ${r.warmup ? (r.warmup.error ? `failed: ${r.warmup.error}` : `${f(r.warmup.ttiMs)} ms`) : "none"}`,
    "",
    table(head, body),
    "",
    "Times in ms. median/p95/p99 as ComputeSDK computes them (5% trimmed at each end, nearest rank) over",
    "the successful iterations; min/max untrimmed. create / probe / node -v: medians of each timed step over",
    "the iterations that completed it, failed ones included (raw: run --detach / exec). score: ComputeSDK's",
    "composite (0.6 median + 0.25 p95 + 0.15 p99, each 100 at 0 ms and 0 at 10 s, times the success rate).",
    "first ready: the fastest TTI under load.",
    "",
    `Median TTI in seconds beside the published medians (${PUBLISHED.source}).`,
    "Their client reaches each provider over the internet; here it runs on the server's host, on its cores:",
    "",
    table(["mode", "aenv (this run)", ...PUBLISHED.providers.map((p) => `${p} (published)`)], pub),
    "",
  ];
  const fails = r.modes.flatMap((m) =>
    m.errorMessages.slice(0, 5).map((e) => `- ${m.mode} ×${e.count} at ${e.message}`),
  );
  if (fails.length)
    lines.push("Failed iterations (most frequent messages; ids and long numbers blurred):", "", ...fails, "");
  const notes = r.modes
    .filter((m) => m.destroyFailures || m.leftAfter || m.reuseSuspected)
    .map(
      (m) =>
        `- ${m.mode}: ${m.destroyFailures} destroy failures, ${m.leftAfter} sandboxes left after the mode, ` +
        `${m.reuseSuspected} with ≥ 3 repeated identity signals (a restored image repeats them; informational)`,
    );
  if (notes.length) lines.push(...notes, "");
  if (r.errors.length) lines.push("Errors:", "", ...r.errors.map((e) => `- ${e}`), "");
  return lines.join("\n");
}
