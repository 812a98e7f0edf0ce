import { lstatSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { e2b } from "@computesdk/e2b";
import { ROOT, startServer, type TestServer, useE2b } from "../test/helpers/server.js";
import { benchLog, envNum, finishMeta, hostMeta } from "./meta.js";
import { RESULTS, templateRootfs } from "./paths.js";
import { RawRunsc } from "./raw-runsc.js";
import { runscIds, stopBenchServer } from "./server-teardown.js";
import { type Iteration, ReuseDetector, runIteration, type TtiCompute } from "./tti-iteration.js";
import {
  MODES,
  type Mode,
  type ModeResult,
  markdown,
  PUBLISHED,
  type RawResult,
  summarizeMode,
  type TtiReport,
} from "./tti-report.js";
import { ttiStats } from "./tti-stats.js";

const SMOKE = process.env.BENCH_SMOKE === "1";
const SEQ_N = envNum("BENCH_TTI_N", SMOKE ? 2 : 100);
const STAGGER_N = envNum("BENCH_TTI_STAGGER_N", SMOKE ? 3 : 100);
const STAGGER_MS = envNum("BENCH_TTI_STAGGER_MS", 200);
const BURST_N = envNum("BENCH_TTI_BURST_N", SMOKE ? 3 : 100);
const RAW_N = envNum("BENCH_TTI_RAW_N", SMOKE ? 2 : 10);
const TIMEOUT_S = envNum("BENCH_TTI_TIMEOUT_S", 1800);
const TEMPLATE = process.env.BENCH_TTI_TEMPLATE || undefined;
// 0 is a meaningful value here (no pool), which envNum would read as unset.
const POOL_MAX = /^\d+$/.test(process.env.BENCH_TTI_POOL_MAX ?? "")
  ? Number(process.env.BENCH_TTI_POOL_MAX)
  : undefined;
const WANTED = (process.env.BENCH_TTI_MODES ?? MODES.join(",")).split(",").map((m) => m.trim());
const RUN_MODES = MODES.filter((m) => WANTED.includes(m));

const log = benchLog("tti");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const deadline = Date.now() + TIMEOUT_S * 1000;
const pastDeadline = () => Date.now() > deadline;

let server: TestServer | undefined;
let raw: RawRunsc | undefined;
let destroyFailures = 0;

function pkgVersion(name: string): string {
  try {
    const pkg = JSON.parse(readFileSync(join(ROOT, "node_modules", name, "package.json"), "utf8")) as {
      version?: unknown;
    };
    return typeof pkg.version === "string" ? pkg.version : "unknown";
  } catch {
    return "unknown";
  }
}

/**
 * Kills what the server still lists (a destroy that failed), then waits until its runsc
 * containers stop changing for 1.5 s, at most 60 s: kills' `runsc delete` and the warm pool's
 * refill must not share the cores with the next mode. Returns the sandboxes it killed.
 */
async function settle(s: TestServer): Promise<number> {
  const listed = (await s.api("GET", "/sandboxes")).body;
  const ids = Array.isArray(listed) ? listed.map((x) => (x as { sandboxID?: string }).sandboxID ?? "") : [];
  for (const id of ids.filter(Boolean)) await s.api("DELETE", `/sandboxes/${id}`).catch(() => {});
  const until = Date.now() + 60_000;
  let last = runscIds(s).join(",");
  let stableSince = Date.now();
  while (Date.now() - stableSince < 1500 && Date.now() < until) {
    await sleep(250);
    const now = runscIds(s).join(",");
    if (now !== last) [last, stableSince] = [now, Date.now()];
  }
  return ids.length;
}

function describe(it: Iteration): string {
  if (it.error) return `FAILED at ${it.failedAt} (${it.failure}): ${it.error.split("\n")[0]?.slice(0, 200)}`;
  return `${it.ttiMs.toFixed(0)} ms (create ${it.createMs?.toFixed(0)}, probe ${it.probeMs?.toFixed(0)}, node -v ${it.nodeMs?.toFixed(0)})`;
}

const hooks = {
  onDestroyFailed: (id: string, err: Error) => {
    destroyFailures++;
    log(`destroy ${id}: ${err.message}`);
  },
};

async function runMode(mode: Mode, compute: TtiCompute, errors: string[]): Promise<Iteration[]> {
  const detector = new ReuseDetector();
  const once = () => runIteration(compute, detector, TEMPLATE, hooks);
  if (mode === "sequential") {
    const out: Iteration[] = [];
    for (let i = 0; i < SEQ_N; i++) {
      if (pastDeadline()) {
        errors.push(`sequential: stopped after ${i} of ${SEQ_N} (BENCH_TTI_TIMEOUT_S=${TIMEOUT_S})`);
        break;
      }
      const it = await once();
      out.push(it);
      log(`sequential ${i + 1}/${SEQ_N}: ${describe(it)}`);
    }
    return out;
  }
  const n = mode === "staggered" ? STAGGER_N : BURST_N;
  const t0 = performance.now();
  const launched: Promise<Iteration>[] = [];
  for (let i = 0; i < n; i++) {
    // Burst launches every iteration in the same tick; staggered waits between launches.
    if (mode === "staggered" && i > 0) await sleep(STAGGER_MS);
    if (pastDeadline()) {
      errors.push(`${mode}: launched ${i} of ${n} (BENCH_TTI_TIMEOUT_S=${TIMEOUT_S})`);
      break;
    }
    const launchedAtMs = performance.now() - t0;
    launched.push(
      once().then((it) => {
        it.launchedAtMs = launchedAtMs;
        it.readyAtMs = performance.now() - t0;
        log(`${mode} ${i + 1}/${n} (launched +${(launchedAtMs / 1000).toFixed(2)} s): ${describe(it)}`);
        return it;
      }),
    );
  }
  return Promise.all(launched);
}

/** The node binary's path inside the rootfs, if any (lstat: an absolute symlink must not resolve on the host). */
function nodeIn(rootfs: string): string | undefined {
  for (const p of ["/usr/local/bin/node", "/usr/bin/node"]) {
    try {
      lstatSync(join(rootfs, p));
      return p;
    } catch {
      // not there
    }
  }
  return undefined;
}

/** `run --detach` + one exec on the same rootfs, sequential, after one discarded warm-up. */
async function rawTti(r: RawRunsc, rootfs: string): Promise<RawResult> {
  const node = nodeIn(rootfs);
  const cmd = node ? [node, "-v"] : ["/bin/true"];
  const total: number[] = [];
  const runs: number[] = [];
  const execs: number[] = [];
  const errors: string[] = [];
  for (let i = 0; i < RAW_N + 1; i++) {
    if (pastDeadline()) {
      errors.push(`stopped after ${total.length} of ${RAW_N} (BENCH_TTI_TIMEOUT_S=${TIMEOUT_S})`);
      break;
    }
    const id = r.newId();
    try {
      const t0 = performance.now();
      await r.start(id);
      const t1 = performance.now();
      const res = await r.exec(id, cmd, { timeoutMs: 30_000 });
      const t2 = performance.now();
      if (node && !res.stdout.toString().startsWith("v"))
        throw new Error(`node -v printed ${res.stdout.toString().trim()}`);
      if (i === 0) continue;
      total.push(t2 - t0);
      runs.push(t1 - t0);
      execs.push(t2 - t1);
    } catch (err) {
      errors.push((err as Error).message);
    } finally {
      await r.delete(id);
    }
  }
  log(`raw: ${total.length}/${RAW_N}, median ${ttiStats(total).median.toFixed(0)} ms`);
  return {
    command: node ? `${node} -v` : "/bin/true (the rootfs has no node)",
    n: RAW_N,
    ok: total.length,
    tti: ttiStats(total),
    runMs: ttiStats(runs),
    execMs: ttiStats(execs),
    samplesMs: total,
    errors,
  };
}

async function cleanup(): Promise<void> {
  if (raw) await raw.cleanup().catch((e: Error) => log(`raw cleanup: ${e.message}`));
  raw = undefined;
  const s = server;
  server = undefined;
  if (!s) return;
  await stopBenchServer(s);
}

async function main(report: TtiReport): Promise<void> {
  server = await startServer({
    env: {
      AENV_NET_PREFIX: process.env.BENCH_NET_PREFIX ?? "aei",
      AENV_SLOT_CIDR: process.env.BENCH_SLOT_CIDR ?? "10.214.0.0/16",
      AENV_LOG_LEVEL: "warn",
      // The server's own default (the test helper's is 2): network slots made ahead of creates.
      AENV_WARM_SLOTS: "4",
      ...(POOL_MAX === undefined
        ? {}
        : { AENV_WARM_POOL_MAX: String(POOL_MAX), AENV_WARM_POOL_MIN: String(Math.min(1, POOL_MAX)) }),
    },
  });
  const s = server;
  useE2b(s);
  report.routing = `E2B_API_URL = E2B_SANDBOX_URL = ${s.url} (read by the e2b SDK on each call; the provider passes only apiKey)`;
  const details = (await s.api("GET", "/health/details")).body as { runtime?: { platform?: string } };
  report.meta.platform = details.runtime?.platform ?? "unknown";
  report.meta.aenvRuntime = details.runtime;
  // As theirs builds it: e2b({ apiKey: process.env.E2B_API_KEY! }).
  const compute: TtiCompute = e2b({ apiKey: process.env.E2B_API_KEY ?? "" });

  log(`warm-up create (template ${report.template})`);
  report.warmup = await runIteration(compute, new ReuseDetector(), TEMPLATE, hooks);
  log(`warm-up: ${describe(report.warmup)}`);
  await settle(s);

  // Raw first: the server idles meanwhile (its pooled sandboxes are frozen).
  const rootfs = templateRootfs(TEMPLATE ?? "base");
  raw = new RawRunsc({ rootfs, platform: report.meta.platform });
  log(`raw runsc ×${RAW_N}`);
  report.raw = await rawTti(raw, rootfs);
  report.errors.push(...report.raw.errors.map((e) => `raw: ${e}`));
  await raw.cleanup();
  raw = undefined;

  for (const mode of RUN_MODES) {
    if (pastDeadline()) {
      report.errors.push(`${mode}: not run (BENCH_TTI_TIMEOUT_S=${TIMEOUT_S})`);
      continue;
    }
    log(`${mode}: ${mode === "sequential" ? SEQ_N : mode === "staggered" ? STAGGER_N : BURST_N} sandboxes`);
    destroyFailures = 0;
    const t0 = performance.now();
    const its = await runMode(mode, compute, report.errors);
    const wallClockMs = performance.now() - t0;
    const failed = destroyFailures;
    const leftAfter = await settle(s);
    const m: ModeResult = summarizeMode(mode, its, {
      staggerDelayMs: mode === "staggered" ? STAGGER_MS : undefined,
      wallClockMs: mode === "sequential" ? undefined : wallClockMs,
      destroyFailures: failed,
      leftAfter,
    });
    report.modes.push(m);
    report.nodeVersion ??= its.find((i) => i.nodeVersion)?.nodeVersion;
    log(`${mode}: ${m.ok}/${m.n} ok, median ${m.tti.median.toFixed(0)} ms, score ${m.compositeScore}`);
    if (m.ok === 0) report.errors.push(`${mode}: no iteration succeeded (${m.errorMessages[0]?.message ?? "?"})`);
  }
}

const started = Date.now();
const report: TtiReport = {
  meta: hostMeta({
    modes: RUN_MODES.join(","),
    sequentialN: SEQ_N,
    staggeredN: STAGGER_N,
    staggerMs: STAGGER_MS,
    burstN: BURST_N,
    rawN: RAW_N,
    poolMax: POOL_MAX ?? "server default",
    smoke: SMOKE ? "yes" : "no",
  }),
  provider: { package: "@computesdk/e2b", version: pkgVersion("@computesdk/e2b"), e2b: pkgVersion("e2b") },
  routing: "",
  template: TEMPLATE ?? "base (create() without options)",
  modes: [],
  published: PUBLISHED,
  errors: [],
};
for (const sig of ["SIGINT", "SIGTERM"] as const)
  process.once(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
if (RUN_MODES.length === 0) report.errors.push(`BENCH_TTI_MODES names no mode of ${MODES.join(", ")}`);
else {
  try {
    await main(report);
  } catch (err) {
    report.errors.push((err as Error).message);
    log(`aborted: ${(err as Error).message}`);
  } finally {
    await cleanup();
  }
}
finishMeta(report.meta, started);
mkdirSync(RESULTS, { recursive: true });
writeFileSync(join(RESULTS, "tti-latest.json"), `${JSON.stringify(report, null, 2)}\n`);
const md = markdown(report);
writeFileSync(join(RESULTS, "tti-latest.md"), md);
console.log(md);
process.exit(report.errors.length ? 1 : 0);
