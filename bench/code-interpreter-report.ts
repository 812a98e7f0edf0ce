/** The code interpreter benchmark's results (bench/code-interpreter.ts) and their markdown report. */
import type { BenchMeta } from "./meta.js";
import { metaLines } from "./report.js";
import { percentile, type Summary, summarize } from "./stats.js";

export type Summary90 = Summary & { p90: number };

export function summarize90(samples: readonly number[]): Summary90 {
  return { ...summarize(samples), p90: percentile(samples, 90) };
}

export interface CreateToFirstRun extends Summary90 {
  /** Sandboxes the server's warm pool held for the template, and held before every timed create. */
  poolSize: number;
  createP50: number;
  firstRunP50: number;
  /** The same sandbox's second runCode('1') right after (untimed in the figure). */
  secondRunP50: number;
  samples: number[];
}

export interface RunRoundTrip {
  /** `runCode('1')` through the SDK, the server's proxy and the service in the sandbox. */
  aenv: Summary90;
  /** `execute_request` → `execute_reply` + idle on the template's jupyter-server and kernel, chrooted on the host. */
  local: Summary90;
  /** aenv p50 / local p50. */
  ratio: number;
}

export interface ForkSide {
  /** create → the DataFrame built (the one prepare). */
  prepareMs: number;
  /** `fork({count})` until it answered. */
  forkCallMs: number;
  /** `fork({count})` until every child answered a cell that uses the DataFrame. */
  forkUntilAnsweredMs: number;
  /** prepare + fork until every child answered: the wall time to have them all. */
  totalMs: number;
  children: number;
  /** Children whose answer matched the parent's DataFrame. */
  childrenMatching: number;
  memAvailableDropMiBPerSandbox: number;
}

export interface FreshSide {
  /** First create to the last sandbox answering a cell that uses its own DataFrame. */
  wallMs: number;
  concurrency: number;
  /** Per sandbox: create → DataFrame built → the cell that uses it answered. */
  perSandboxMs: Summary;
  createMs: Summary;
  buildMs: Summary;
  sandboxes: number;
  memAvailableDropMiBPerSandbox: number;
}

export interface RlFigure {
  /** The DataFrame's own size, df.memory_usage().sum(). */
  dataFrameBytes: number;
  fork?: ForkSide;
  fresh?: FreshSide;
  /** fresh wall / fork total (prepare included): how many times sooner fork has them all. */
  speedup?: number;
  /** fresh wall / fork's part after the prepare. */
  speedupForkOnly?: number;
}

export interface Target {
  what: string;
  value: number;
  limit: number;
  unit: string;
  met: boolean;
}

export interface CodeInterpreterReport {
  meta: BenchMeta;
  createToFirstRun?: CreateToFirstRun;
  runRoundTrip?: RunRoundTrip;
  rl?: RlFigure;
  targets: Target[];
  errors: string[];
}

const CREATE_P50 = "create → first runCode('1'), warm pool, p50";
const CREATE_P90 = "create → first runCode('1'), warm pool, p90";
const RT_RATIO = "runCode('1') p50 / local kernel p50";

/** The targets the figures are held to; each is shown met or not met. */
export function targets(r: CodeInterpreterReport): Target[] {
  const out: Target[] = [];
  const held = (what: string, value: number, limit: number, unit: string) =>
    out.push({ what, value, limit, unit, met: value <= limit });
  const c = r.createToFirstRun;
  if (c) {
    held(CREATE_P50, c.p50, 300, "ms");
    held(CREATE_P90, c.p90, 300, "ms");
  }
  if (r.runRoundTrip) held(RT_RATIO, r.runRoundTrip.ratio, 1.5, "×");
  return out;
}

type Row = [metric: string, aenv: number | undefined, baseline: number | undefined, digits: number, target?: Target];

function rows(r: CodeInterpreterReport): Row[] {
  const out: Row[] = [];
  const find = (what: string) => r.targets.find((t) => t.what === what);
  const c = r.createToFirstRun;
  if (c) {
    const n = `n=${c.n}, pool ${c.poolSize}`;
    out.push([`create → first runCode('1'), warm pool, p50 (ms, ${n})`, c.p50, undefined, 0, find(CREATE_P50)]);
    out.push(["create → first runCode('1'), warm pool, p90 (ms)", c.p90, undefined, 0, find(CREATE_P90)]);
    out.push(["  of which create (a pool claim), p50 (ms)", c.createP50, undefined, 0]);
    out.push(["  of which the first runCode('1'), p50 (ms)", c.firstRunP50, undefined, 0]);
    out.push(["  (the second runCode('1') right after, not in the figure), p50 (ms)", c.secondRunP50, undefined, 0]);
  }
  const t = r.runRoundTrip;
  if (t) {
    out.push([
      `runCode('1') round trip, p50 (ms, n=${t.aenv.n}; baseline: local kernel)`,
      t.aenv.p50,
      t.local.p50,
      1,
      find(RT_RATIO),
    ]);
    out.push(["runCode('1') round trip, p90 (ms)", t.aenv.p90, t.local.p90, 1]);
  }
  const rl = r.rl;
  if (rl) {
    const f = rl.fork;
    const s = rl.fresh;
    const n = f?.children ?? s?.sandboxes ?? 0;
    const mb = (rl.dataFrameBytes / 1e6).toFixed(0);
    const each = s ? `${s.concurrency} at a time` : "";
    out.push([
      `${n} sandboxes holding a ${mb} MB DataFrame (s; aenv: prepare once + fork ×${n}; baseline: ${n} fresh, ${each})`,
      f ? f.totalMs / 1000 : undefined,
      s ? s.wallMs / 1000 : undefined,
      1,
    ]);
    out.push(["  prepare: create → DataFrame built (s)", f ? f.prepareMs / 1000 : undefined, undefined, 1]);
    out.push(["  fork call answered (s)", f ? f.forkCallMs / 1000 : undefined, undefined, 1]);
    out.push([
      `  fork ×${n} → every child answered a cell using it (s; baseline: p50 of one fresh sandbox)`,
      f ? f.forkUntilAnsweredMs / 1000 : undefined,
      s ? s.perSandboxMs.p50 / 1000 : undefined,
      1,
    ]);
    out.push([
      "  MemAvailable drop per sandbox (MiB)",
      f?.memAvailableDropMiBPerSandbox,
      s?.memAvailableDropMiBPerSandbox,
      0,
    ]);
  }
  return out;
}

function fmt(v: number | undefined, digits: number): string {
  return v === undefined || Number.isNaN(v) ? "–" : v.toFixed(digits);
}

function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || Number.isNaN(a) || Number.isNaN(b) || b === 0) return "–";
  return `${(a / b).toFixed(2)}×`;
}

function targetCells(t: Target | undefined): [string, string] {
  if (!t) return ["", ""];
  return [`≤ ${t.limit}${t.unit === "×" ? "×" : ` ${t.unit}`}`, t.met ? "met" : "NOT MET"];
}

export function table(r: CodeInterpreterReport): string {
  const head = ["metric", "aenv (code-interpreter SDK)", "baseline", "aenv / baseline", "target", ""];
  const body = rows(r).map(([label, a, b, d, t]) => [label, fmt(a, d), fmt(b, d), ratio(a, b), ...targetCells(t)]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((row) => (row[i] as string).length)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i === 0 || i === 5 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join(" | ")} |`;
  const sep = `|${widths.map((w, i) => (i === 0 || i === 5 ? `:${"-".repeat(w + 1)}` : `${"-".repeat(w + 1)}:`)).join("|")}|`;
  return [line(head), sep, ...body.map(line)].join("\n");
}

export function markdown(r: CodeInterpreterReport, notes: string[]): string {
  const parts = ["# aenv code interpreter benchmark", "", ...metaLines(r.meta).map((l) => `- ${l}`)];
  parts.push(...notes.map((n) => `- ${n}`), "", table(r), "");
  const rl = r.rl;
  if (rl?.speedup !== undefined)
    parts.push(
      `Fresh sandboxes' wall time over fork's: ${rl.speedup.toFixed(2)}× with fork's prepare counted, ` +
        `${rl.speedupForkOnly?.toFixed(2) ?? "–"}× counting only what follows it (above 1: fork has them all sooner).`,
      "",
    );
  if (r.errors.length) parts.push("Errors:", "", ...r.errors.map((e) => `- ${e}`), "");
  return parts.join("\n");
}
