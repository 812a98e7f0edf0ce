/** Turns benchmark results into a table (markdown, readable as plain text) and JSON files. */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Summary } from "./stats.js";

export interface Meta {
  date: string;
  runscVersion: string;
  platform: string;
  node: string;
  cpus: number;
  cpuModel: string;
  memTotalMiB: number;
  kernel: string;
  /** 1/5/15-minute load averages when the run started and ended (other work skews timings). */
  loadAvgStart: number[];
  loadAvgEnd?: number[];
  aenvRuntime?: unknown;
  settings: Record<string, number | string>;
  durationS?: number;
}

export interface Throughput {
  /** MB/s (10^6 bytes per second), one per rep. */
  samples: number[];
  mean: number;
  min: number;
  max: number;
}

export interface IdleMemory {
  k: number;
  /** Sum of PSS of each sandbox's runsc processes, MiB, one per sandbox. */
  pssMiB: number[];
  pssMiBPerSandbox: number;
  processesPerSandbox: number;
  /** Distinct host address spaces per sandbox (stub processes of one guest mm count once). */
  addressSpacesPerSandbox: number;
  memAvailableDropMiBPerSandbox: number;
  /** System MemAvailable before the K sandboxes, with them up, and after their teardown. */
  memAvailableMiB: { before: number; up: number; after: number };
  /** Process-by-process PSS of the first sandbox. */
  firstSandboxProcesses: { pid: number; name: string; pssMiB: number; sameMmAs?: number }[];
}

export interface Results {
  meta: Meta;
  createToFirstCommand?: {
    aenv?: Summary & { createP50: number; firstCommandP50: number };
    raw?: Summary & { runP50: number; firstExecP50: number };
    /** The same through a server with a warm pool (sandbox.warm_pool_min/max), one waiting per create. */
    pool?: Summary & { createP50: number; firstCommandP50: number };
  };
  commandRoundTrip?: { aenv?: Summary; raw?: Summary };
  fileWrite?: { bytes: number; aenv?: Throughput; raw?: Throughput };
  fileRead?: { bytes: number; aenv?: Throughput; raw?: Throughput };
  /** The same transfers through the proxy with node:http, not the SDK's fetch (the server's path alone). */
  fileWriteHttp?: Throughput;
  fileReadHttp?: Throughput;
  idleMemory?: { aenv?: IdleMemory; raw?: IdleMemory };
  errors: string[];
}

type Row = [label: string, aenv: number | undefined, raw: number | undefined, digits: number];

function fmt(v: number | undefined, digits: number): string {
  return v === undefined || Number.isNaN(v) ? "–" : v.toFixed(digits);
}

function ratio(a: number | undefined, b: number | undefined): string {
  if (a === undefined || b === undefined || Number.isNaN(a) || Number.isNaN(b) || b === 0) return "–";
  return `${(a / b).toFixed(2)}×`;
}

export function rows(r: Results): Row[] {
  const out: Row[] = [];
  const c = r.createToFirstCommand;
  const n = c?.aenv?.n ?? c?.raw?.n ?? 0;
  out.push([`create → first command, p50 (ms, n=${n})`, c?.aenv?.p50, c?.raw?.p50, 0]);
  out.push(["create → first command, p95 (ms)", c?.aenv?.p95, c?.raw?.p95, 0]);
  out.push(["create → first command, min (ms)", c?.aenv?.min, c?.raw?.min, 0]);
  out.push(["create → first command, mean (ms)", c?.aenv?.mean, c?.raw?.mean, 0]);
  out.push(["  of which create / run --detach, p50 (ms)", c?.aenv?.createP50, c?.raw?.runP50, 0]);
  out.push(["  of which first command / exec, p50 (ms)", c?.aenv?.firstCommandP50, c?.raw?.firstExecP50, 0]);
  if (c?.pool) {
    out.push([`create → first command, warm pool, p50 (ms, n=${c.pool.n})`, c.pool.p50, c?.raw?.p50, 0]);
    out.push(["create → first command, warm pool, p95 (ms)", c.pool.p95, c?.raw?.p95, 0]);
    out.push(["  of which create (claim), p50 (ms)", c.pool.createP50, c?.raw?.runP50, 0]);
    out.push(["  of which first command, p50 (ms)", c.pool.firstCommandP50, c?.raw?.firstExecP50, 0]);
  }
  const t = r.commandRoundTrip;
  out.push([
    `\`true\` round trip, warm, p50 (ms, n=${t?.aenv?.n ?? "–"}/${t?.raw?.n ?? "–"})`,
    t?.aenv?.p50,
    t?.raw?.p50,
    1,
  ]);
  out.push(["`true` round trip, warm, p95 (ms)", t?.aenv?.p95, t?.raw?.p95, 1]);
  const mib = (r.fileWrite?.bytes ?? r.fileRead?.bytes ?? 0) / 2 ** 20;
  const w = r.fileWrite;
  const reps = w?.aenv?.samples.length ?? w?.raw?.samples.length ?? 0;
  out.push([`file write ${mib} MiB, mean of ${reps} (MB/s)`, w?.aenv?.mean, w?.raw?.mean, 1]);
  out.push(["file write, min (MB/s)", w?.aenv?.min, w?.raw?.min, 1]);
  const rd = r.fileRead;
  out.push([`file read ${mib} MiB, mean of ${reps} (MB/s)`, rd?.aenv?.mean, rd?.raw?.mean, 1]);
  out.push(["file read, min (MB/s)", rd?.aenv?.min, rd?.raw?.min, 1]);
  if (r.fileWriteHttp || r.fileReadHttp) {
    out.push(["  file write, node:http client, not the SDK, mean (MB/s)", r.fileWriteHttp?.mean, w?.raw?.mean, 1]);
    out.push(["  file read, node:http client, not the SDK, mean (MB/s)", r.fileReadHttp?.mean, rd?.raw?.mean, 1]);
  }
  const m = r.idleMemory;
  out.push([
    `idle memory, PSS per sandbox (MiB, K=${m?.aenv?.k ?? m?.raw?.k ?? "–"})`,
    m?.aenv?.pssMiBPerSandbox,
    m?.raw?.pssMiBPerSandbox,
    1,
  ]);
  out.push([
    "idle memory, MemAvailable drop per sandbox (MiB)",
    m?.aenv?.memAvailableDropMiBPerSandbox,
    m?.raw?.memAvailableDropMiBPerSandbox,
    1,
  ]);
  out.push(["host processes per sandbox", m?.aenv?.processesPerSandbox, m?.raw?.processesPerSandbox, 1]);
  out.push([
    "  of which distinct address spaces",
    m?.aenv?.addressSpacesPerSandbox,
    m?.raw?.addressSpacesPerSandbox,
    1,
  ]);
  return out;
}

export function metaLines(m: Meta): string[] {
  return [
    `date: ${m.date}`,
    `runsc: ${m.runscVersion}, platform ${m.platform}`,
    `node: ${m.node}; cpus: ${m.cpus} × ${m.cpuModel}; memory: ${m.memTotalMiB} MiB; kernel ${m.kernel}`,
    `load average (1/5/15 min): ${m.loadAvgStart.join(" ")} at start${m.loadAvgEnd ? `, ${m.loadAvgEnd.join(" ")} at end` : ""}`,
    `settings: ${Object.entries(m.settings)
      .map(([k, v]) => `${k}=${v}`)
      .join(", ")}${m.durationS !== undefined ? `; bench took ${m.durationS.toFixed(0)} s` : ""}`,
  ];
}

/** A markdown table with padded columns, so that it also reads well as plain text. */
export function table(r: Results): string {
  const head = ["metric", "aenv (e2b SDK)", "raw runsc", "aenv / raw"];
  const body = rows(r).map(([label, a, b, d]) => [label, fmt(a, d), fmt(b, d), ratio(a, b)]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((row) => (row[i] as string).length)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join(" | ")} |`;
  const sep = `|${widths.map((w, i) => (i === 0 ? `:${"-".repeat(w + 1)}` : `${"-".repeat(w + 1)}:`)).join("|")}|`;
  return [line(head), sep, ...body.map(line)].join("\n");
}

export function markdown(r: Results): string {
  const parts = ["# aenv benchmark", "", ...metaLines(r.meta).map((l) => `- ${l}`), "", table(r), ""];
  if (r.errors.length) parts.push("Errors:", "", ...r.errors.map((e) => `- ${e}`), "");
  return parts.join("\n");
}

/** Writes results/<timestamp>.json, results/latest.json and results/latest.md; returns the paths. */
export function writeResults(dir: string, r: Results): string[] {
  mkdirSync(dir, { recursive: true });
  const stamp = r.meta.date.replace(/[:.]/g, "-");
  const json = `${JSON.stringify(r, null, 2)}\n`;
  const files = [join(dir, `${stamp}.json`), join(dir, "latest.json"), join(dir, "latest.md")];
  writeFileSync(files[0] as string, json);
  writeFileSync(files[1] as string, json);
  writeFileSync(files[2] as string, markdown(r));
  return files;
}
