/**
 * The rollout benchmark's results (bench/rollouts.ts) and their markdown report.
 */
import type { CpuSplit } from "./cpu.js";
import type { BenchMeta } from "./meta.js";
import { metaLines } from "./report.js";
import type { Summary } from "./stats.js";

export interface RolloutResult {
  seed: number;
  diffSha256: string;
  commit: string;
  reward: number;
}

export interface Rollout {
  seed: number;
  /** From the strategy's start to this rollout's result read back. */
  doneAtS: number;
  /** Create (or fork share) → result read, for this rollout alone. */
  totalMs: number;
  hashMs: number;
  rolloutMs: number;
  result: RolloutResult;
}

export interface StrategyResult {
  budgetS: number;
  rollouts: number;
  rolloutsPerHour: number;
  /** Rollouts running (or sandboxes setting up) when the budget ran out: killed, not counted. */
  cutAtDeadline: number;
  setupS: Summary;
  createMs: Summary;
  hashMs: Summary;
  rolloutMs: Summary;
  /** Per rollout, from its sandbox's create (or its fork call) to its result read back. */
  perRolloutMs: Summary;
  distinctResults: number;
  resultsDiverge: boolean;
  /**
   * Where the CPU went (bench/cpu.ts): setupPerRollout over its whole budget, forkFromPrepared
   * from its first fork on (the parent's one setup excluded), with the rollouts finished then.
   */
  cpu?: CpuSplit & { rollouts: number };
  errors: string[];
}

export interface SetupPerRollout extends StrategyResult {
  concurrency: number;
  /** concurrency / mean per-rollout time: the rate without the budget's end effects. */
  steadyStateRolloutsPerHour: number;
}

export interface ForkFromPrepared extends StrategyResult {
  forksLive: number;
  /** Whether the prepared parent was paused before the first fork (children restore from its pause image). */
  parentPaused: boolean;
  /** parent.pause() after the setup, in ms (0 when not paused). */
  parentPauseMs: number;
  forkCalls: number;
  /** fork({count}) until it returned, per call. */
  forkMs: Summary;
  childrenForked: number;
  parentTreeSha256: string;
  treeFiles: number;
  /** Children whose tree hash matched the parent's before their rollout / all checked. */
  identicalChildren: number;
  checkedChildren: number;
}

export interface Report {
  meta: BenchMeta;
  setupPerRollout?: SetupPerRollout;
  forkFromPrepared?: ForkFromPrepared;
  /** forkFromPrepared.rolloutsPerHour / setupPerRollout.rolloutsPerHour; the issue's goal is ≥ 10. */
  speedup: number | null;
  /** The same ratio from setupPerRollout's steady-state rate (no budget end effects on its side). */
  speedupVsSteadyState: number | null;
  errors: string[];
}

const f = (v: number | undefined, d = 0) => (v === undefined || Number.isNaN(v) ? "–" : v.toFixed(d));

function cpuPer(r: StrategyResult | undefined, k: keyof CpuSplit): string {
  return r?.cpu?.rollouts ? f(r.cpu[k] / r.cpu.rollouts, 2) : "–";
}
const cpuPair = (r: StrategyResult | undefined) => `${cpuPer(r, "serverS")} / ${cpuPer(r, "serverCommandsS")}`;
const cpuRest = (r: StrategyResult | undefined) => `${cpuPer(r, "clientS")} / ${cpuPer(r, "sandboxesS")}`;

export function markdown(r: Report): string {
  const a = r.setupPerRollout;
  const b = r.forkFromPrepared;
  const row = (label: string, x: string, y: string) => `| ${label} | ${x} | ${y} |`;
  const lines = [
    "# aenv RL-rollout benchmark",
    "",
    ...metaLines(r.meta).map((l) => `- ${l}`),
    `- commit: ${r.meta.commit}`,
    "",
    "| metric | setupPerRollout | forkFromPrepared |",
    "|:--|--:|--:|",
    row("budget (s)", f(a?.budgetS), f(b?.budgetS)),
    row("rollouts finished in budget", f(a?.rollouts), f(b?.rollouts)),
    row("**rollouts / hour**", `**${f(a?.rolloutsPerHour)}**`, `**${f(b?.rolloutsPerHour)}**`),
    row("  steady state (concurrency / mean per-rollout time)", f(a?.steadyStateRolloutsPerHour), "–"),
    row("killed at the deadline", f(a?.cutAtDeadline), f(b?.cutAtDeadline)),
    row("live at once", f(a?.concurrency), f(b?.forksLive)),
    row("setup, mean (s)", f(a?.setupS.mean, 1), f(b?.setupS.mean, 1)),
    row("create, mean (ms)", f(a?.createMs.mean), f(b?.createMs.mean)),
    row(
      "parent paused before forking (pause ms)",
      "–",
      b ? (b.parentPaused ? `yes (${f(b.parentPauseMs)})` : "no") : "–",
    ),
    row("fork call, p50 / max (ms)", "–", b ? `${f(b.forkMs.p50)} / ${f(b.forkMs.max)}` : "–"),
    row("tree hash, p50 (ms)", f(a?.hashMs.p50), f(b?.hashMs.p50)),
    row("rollout commands + result read, p50 (ms)", f(a?.rolloutMs.p50), f(b?.rolloutMs.p50)),
    row("per rollout, create/fork → result, p50 (ms)", f(a?.perRolloutMs.p50), f(b?.perRolloutMs.p50)),
    row("CPU per rollout: host in all (s; fork: after the parent's setup)", cpuPer(a, "hostS"), cpuPer(b, "hostS")),
    row("  aenv-server / its commands (runsc CLI, ip, nft)", cpuPair(a), cpuPair(b)),
    row("  SDK client (this process) / sandboxes and the rest", cpuRest(a), cpuRest(b)),
    row(
      "distinct results / rollouts",
      a ? `${a.distinctResults} / ${a.rollouts}` : "–",
      b ? `${b.distinctResults} / ${b.rollouts}` : "–",
    ),
    row("children with the parent's tree bytes", "–", b ? `${b.identicalChildren} / ${b.checkedChildren}` : "–"),
    "",
    `Speedup (rollouts/hour, fork ÷ setup per rollout): **${r.speedup === null ? "–" : `${r.speedup.toFixed(1)}×`}**` +
      ` (against setupPerRollout's steady state: ${r.speedupVsSteadyState === null ? "–" : `${r.speedupVsSteadyState.toFixed(1)}×`}); the issue's goal is ≥ 10×.`,
    "",
  ];
  if (r.errors.length) lines.push("Errors:", "", ...r.errors.map((e) => `- ${e}`), "");
  return lines.join("\n");
}
