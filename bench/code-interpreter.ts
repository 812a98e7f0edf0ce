import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "@e2b/code-interpreter";
import { startServer, type TestServer, useE2b } from "../test/helpers/server.js";
import {
  type CodeInterpreterReport,
  type CreateToFirstRun,
  type ForkSide,
  type FreshSide,
  markdown,
  type RunRoundTrip,
  summarize90,
  targets,
} from "./code-interpreter-report.js";
import { LocalJupyter } from "./jupyter-local.js";
import { benchLog, envNum, finishMeta, hostMeta } from "./meta.js";
import { RESULTS, templateRootfs } from "./paths.js";
import { memAvailableKiB, memAvailableMiB } from "./procmem.js";
import { runscIds, stopBenchServer } from "./server-teardown.js";
import { summarize } from "./stats.js";

const SMOKE = process.env.BENCH_SMOKE === "1";
const N = envNum("BENCH_CI_N", SMOKE ? 1 : 10);
const RT_N = envNum("BENCH_CI_RT_N", SMOKE ? 2 : 50);
const FORKS = envNum("BENCH_CI_FORKS", SMOKE ? 1 : 16);
const FRESH_CONCURRENCY = envNum("BENCH_CI_FRESH_CONCURRENCY", SMOKE ? 1 : 4);
const DF_ROWS = envNum("BENCH_CI_DF_ROWS", SMOKE ? 10_000 : 1_600_000);
const TIMEOUT_S = envNum("BENCH_CI_TIMEOUT_S", 900);
const NET_PREFIX = process.env.BENCH_NET_PREFIX ?? "aec";
const SLOT_CIDR = process.env.BENCH_SLOT_CIDR ?? "10.205.0.0/16";
const TEMPLATE = "code-interpreter-v1";
const POOL = 2;
const SANDBOX_TIMEOUT_MS = (TIMEOUT_S + 300) * 1000;
const CELL = { timeoutMs: 300_000, requestTimeoutMs: 300_000 };
/** Kept free on the host beyond what the RL figure's sandboxes are expected to take. */
const RESERVE_MIB = 2048;
/** A code-interpreter sandbox holding the DataFrame, its jupyter and kernel: a generous guess. */
const PER_SANDBOX_MIB = 450;

/** Builds the DataFrame; answers (its bytes, the sum of every cell). */
const BUILD = `import numpy as np, pandas as pd\ndf = pd.DataFrame(np.random.rand(${DF_ROWS}, 8))\n(int(df.memory_usage().sum()), float(df.sum().sum()))`;
/** Reads every cell of it (a restored child touches all its pages). */
const USE = "float(df.sum().sum())";

const log = benchLog("code-interpreter");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const deadline = Date.now() + TIMEOUT_S * 1000;

function guard(): void {
  if (Date.now() > deadline) throw new Error(`bench exceeded BENCH_CI_TIMEOUT_S=${TIMEOUT_S}`);
}

// ---- what must be torn down whatever happens ---------------------------------------------------

const live = new Set<Sandbox>();
let server: TestServer | undefined;
let jupyter: LocalJupyter | undefined;

async function kill(sbx: Sandbox): Promise<void> {
  await sbx.kill().catch(() => {});
  live.delete(sbx);
}

async function killAll(): Promise<void> {
  await Promise.all([...live].map(kill));
}

async function stopServer(): Promise<void> {
  await killAll();
  const s = server;
  server = undefined;
  if (!s) return;
  await stopBenchServer(s);
}

async function cleanup(): Promise<void> {
  await jupyter?.stop().catch((e: Error) => log(`local jupyter stop: ${e.message}`));
  jupyter = undefined;
  await stopServer();
}

for (const sig of ["SIGINT", "SIGTERM"] as const)
  process.once(sig, () => {
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });

// ---- helpers -----------------------------------------------------------------------------------

/**
 * Until the server runs at most `keep` sandboxes (its pool's), at most 60 s: a kill's
 * `runsc delete` (1-2 s of CPU) and a warm image's capture must not run beside a sample.
 */
async function settled(s: TestServer, keep: number): Promise<void> {
  const until = Date.now() + 60_000;
  while (runscIds(s).length > keep && Date.now() < until) await sleep(250);
}

/** The server's "warm pool sandbox ready" lines for the template, in order. */
function poolReadyLines(s: TestServer): number {
  return s
    .logs()
    .split("\n")
    .filter((l) => l.includes("warm pool sandbox ready") && l.includes(`"template":"${TEMPLATE}"`)).length;
}

async function untilPoolRefilled(s: TestServer, lines: number, ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (poolReadyLines(s) < lines) {
    if (Date.now() > until) return false;
    await sleep(50);
  }
  return true;
}

async function create(): Promise<Sandbox> {
  const sbx = await Sandbox.create(TEMPLATE, { timeoutMs: SANDBOX_TIMEOUT_MS });
  live.add(sbx);
  return sbx;
}

async function runText(sbx: Sandbox, code: string): Promise<string> {
  const e = await sbx.runCode(code, CELL);
  if (e.error) throw new Error(`${sbx.sandboxId}: ${e.error.name}: ${e.error.value}`);
  return e.text ?? "";
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t = performance.now();
  const v = await fn();
  return [v, performance.now() - t];
}

function ensureMemory(what: string, sandboxes: number): void {
  const avail = memAvailableKiB() / 1024;
  const need = sandboxes * PER_SANDBOX_MIB + RESERVE_MIB;
  if (avail < need) throw new Error(`${what}: ${avail.toFixed(0)} MiB available, ${need} MiB wanted`);
}

// ---- 1. create → first runCode from the warm pool -------------------------------------------------

async function fillPool(s: TestServer): Promise<void> {
  // The template's first create starts its pool (and, without a warm image yet, a capture:
  // the pool restores from it once it exists). Warm-up creates until the pool is full.
  const t0 = Date.now();
  for (let i = 0; ; i++) {
    guard();
    const before = poolReadyLines(s);
    const sbx = await create();
    await runText(sbx, "1");
    await kill(sbx);
    if (await untilPoolRefilled(s, before + POOL, 90_000)) break;
    if (i >= 3) throw new Error(`the warm pool of ${TEMPLATE} did not fill (${poolReadyLines(s)} ready lines)`);
  }
  await settled(s, POOL);
  log(`warm pool full after ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

async function createToFirstRun(s: TestServer): Promise<CreateToFirstRun> {
  const total: number[] = [];
  const creates: number[] = [];
  const firsts: number[] = [];
  const seconds: number[] = [];
  for (let i = 0; i < N; i++) {
    guard();
    const t0 = performance.now();
    const sbx = await create();
    const t1 = performance.now();
    const lines = poolReadyLines(s);
    try {
      const text = await runText(sbx, "1");
      const t2 = performance.now();
      if (text !== "1") throw new Error(`runCode('1') answered ${JSON.stringify(text)}`);
      total.push(t2 - t0);
      creates.push(t1 - t0);
      firsts.push(t2 - t1);
      // Not part of the figure: whether the first cell's cost is a first-call cost.
      const [, second] = await timed(() => runText(sbx, "1"));
      seconds.push(second);
      log(
        `create → first runCode ${(t2 - t0).toFixed(0)} ms (create ${(t1 - t0).toFixed(0)}, second ${second.toFixed(0)})`,
      );
    } finally {
      await kill(sbx);
    }
    // The claimed one is replaced (1 s after the claim, once nothing else starts); the next
    // sample waits for it and for the kill's teardown.
    if (!(await untilPoolRefilled(s, lines + 1, 60_000))) throw new Error("the warm pool did not refill in 60 s");
    await settled(s, POOL);
    await sleep(300);
  }
  return {
    ...summarize90(total),
    poolSize: POOL,
    createP50: summarize(creates).p50,
    firstRunP50: summarize(firsts).p50,
    secondRunP50: summarize(seconds).p50,
    samples: total,
  };
}

// ---- 2. runCode round trip beside a local kernel ----------------------------------------------------

async function roundTrip(): Promise<RunRoundTrip> {
  const sbx = await create();
  const local = new LocalJupyter(templateRootfs(TEMPLATE));
  jupyter = local;
  try {
    await local.start();
    for (let i = 0; i < 3; i++) {
      await runText(sbx, "1");
      await local.execute("1");
    }
    const a: number[] = [];
    const b: number[] = [];
    // Alternating, so that other work on the host weighs on both sides alike.
    for (let i = 0; i < RT_N; i++) {
      guard();
      const [text, ms] = await timed(() => runText(sbx, "1"));
      if (text !== "1") throw new Error(`runCode('1') answered ${JSON.stringify(text)}`);
      a.push(ms);
      const [res, lms] = await timed(() => local.execute("1"));
      if (res.text !== "1" || res.status !== "ok") throw new Error(`local kernel answered ${JSON.stringify(res)}`);
      b.push(lms);
    }
    const aenv = summarize90(a);
    const base = summarize90(b);
    log(`runCode('1') p50 ${aenv.p50.toFixed(1)} ms, local kernel p50 ${base.p50.toFixed(1)} ms`);
    return { aenv, local: base, ratio: aenv.p50 / base.p50 };
  } finally {
    await local.stop();
    jupyter = undefined;
    await kill(sbx);
  }
}

// ---- 3. the RL figure: fork a prepared kernel vs fresh sandboxes ----------------------------------

function parseBuild(text: string): { bytes: number; sum: string } {
  const m = /^\((\d+), (.+)\)$/.exec(text);
  if (!m) throw new Error(`the DataFrame build answered ${JSON.stringify(text)}`);
  return { bytes: Number(m[1]), sum: m[2] as string };
}

async function forkSide(s: TestServer, report: CodeInterpreterReport): Promise<ForkSide> {
  ensureMemory("fork", FORKS + 1);
  const before = await memAvailableMiB();
  const kids: Sandbox[] = [];
  const t0 = performance.now();
  const parent = await create();
  try {
    const built = parseBuild(await runText(parent, BUILD));
    const prepareMs = performance.now() - t0;
    report.rl = { ...report.rl, dataFrameBytes: built.bytes };
    log(`prepared in ${(prepareMs / 1000).toFixed(1)} s: a DataFrame of ${(built.bytes / 1e6).toFixed(1)} MB`);
    const t1 = performance.now();
    const res = await parent.fork({ count: FORKS, timeoutMs: SANDBOX_TIMEOUT_MS, requestTimeoutMs: 600_000 });
    const forkCallMs = performance.now() - t1;
    const failed: string[] = [];
    for (const k of res) {
      if (k instanceof Error) failed.push(k.message);
      else {
        kids.push(k);
        live.add(k);
      }
    }
    // A child whose first cell fails is an error of the run, not asked again.
    const answers = await Promise.all(
      kids.map((k) =>
        runText(k, USE).catch((err: Error) => {
          report.errors.push(`fork child ${k.sandboxId}: first cell failed: ${err.message}`);
          return undefined;
        }),
      ),
    );
    const forkUntilAnsweredMs = performance.now() - t1;
    const totalMs = performance.now() - t0;
    const up = await memAvailableMiB();
    if (failed.length) report.errors.push(`fork: ${failed.length} of ${FORKS} children failed: ${failed[0]}`);
    const matching = answers.filter((a) => a === built.sum).length;
    if (matching !== kids.length)
      report.errors.push(`fork: ${kids.length - matching} children answered another sum than the parent's`);
    log(
      `fork ×${FORKS}: answered in ${(forkCallMs / 1000).toFixed(1)} s, every child in ${(forkUntilAnsweredMs / 1000).toFixed(1)} s`,
    );
    return {
      prepareMs,
      forkCallMs,
      forkUntilAnsweredMs,
      totalMs,
      children: kids.length,
      childrenMatching: matching,
      memAvailableDropMiBPerSandbox: (before - up) / (kids.length + 1),
    };
  } finally {
    await Promise.all([parent, ...kids].map(kill));
    await settled(s, 0);
  }
}

async function freshSide(s: TestServer): Promise<FreshSide> {
  ensureMemory("fresh", FORKS);
  const before = await memAvailableMiB();
  const per: number[] = [];
  const creates: number[] = [];
  const builds: number[] = [];
  const mine: Sandbox[] = [];
  let next = 0;
  const t0 = performance.now();
  const worker = async () => {
    while (next < FORKS) {
      next++;
      guard();
      const t = performance.now();
      const sbx = await create();
      mine.push(sbx);
      const tc = performance.now();
      parseBuild(await runText(sbx, BUILD));
      const tb = performance.now();
      await runText(sbx, USE);
      per.push(performance.now() - t);
      creates.push(tc - t);
      builds.push(tb - tc);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(FRESH_CONCURRENCY, FORKS) }, worker));
    const wallMs = performance.now() - t0;
    const up = await memAvailableMiB();
    log(`${FORKS} fresh, ${FRESH_CONCURRENCY} at a time: ${(wallMs / 1000).toFixed(1)} s`);
    return {
      wallMs,
      concurrency: FRESH_CONCURRENCY,
      perSandboxMs: summarize(per),
      createMs: summarize(creates),
      buildMs: summarize(builds),
      sandboxes: mine.length,
      memAvailableDropMiBPerSandbox: (before - up) / mine.length,
    };
  } finally {
    await Promise.all(mine.map(kill));
    await settled(s, 0);
  }
}

// ---- main -------------------------------------------------------------------------------------

async function step(report: CodeInterpreterReport, name: string, fn: () => Promise<void>): Promise<void> {
  guard();
  log(name);
  try {
    await fn();
  } catch (err) {
    report.errors.push(`${name}: ${(err as Error).message}`);
    log(`FAILED ${name}: ${(err as Error).message}`);
  }
}

async function serverWith(env: Record<string, string>): Promise<TestServer> {
  const s = await startServer({
    env: { AENV_NET_PREFIX: NET_PREFIX, AENV_SLOT_CIDR: SLOT_CIDR, AENV_LOG_LEVEL: "info", ...env },
  });
  server = s;
  useE2b(s);
  return s;
}

async function main(report: CodeInterpreterReport): Promise<void> {
  // Pool server: steps 1 and 2 (a full pool is frozen: it takes no CPU from the round trips).
  const a = await serverWith({ AENV_WARM_POOL_MIN: String(POOL), AENV_WARM_POOL_MAX: String(POOL) });
  const details = (await a.api("GET", "/health/details")).body as { runtime?: { platform?: string } };
  report.meta.platform = details.runtime?.platform ?? "unknown";
  await step(report, `filling the warm pool of ${TEMPLATE}`, () => fillPool(a));
  await step(report, `create → first runCode('1'), ${N} samples`, async () => {
    report.createToFirstRun = await createToFirstRun(a);
  });
  await step(report, `runCode('1') round trip, ${RT_N} samples, beside a local kernel`, async () => {
    report.runRoundTrip = await roundTrip();
  });
  await stopServer();

  // No pool for the RL figure: its refills would restore beside the forks and the fresh creates.
  const b = await serverWith({ AENV_WARM_POOL_MAX: "0", AENV_LOG_LEVEL: "warn" });
  await step(report, "warm-up create", async () => {
    const sbx = await create();
    await runText(sbx, "1");
    await kill(sbx);
    await settled(b, 0);
  });
  report.rl = { dataFrameBytes: 0 };
  await step(report, `prepare once + fork ×${FORKS}`, async () => {
    const fork = await forkSide(b, report);
    if (report.rl) report.rl.fork = fork;
  });
  await step(report, `${FORKS} fresh sandboxes, ${FRESH_CONCURRENCY} at a time`, async () => {
    const fresh = await freshSide(b);
    if (report.rl) report.rl.fresh = fresh;
  });
  const rl = report.rl;
  if (rl?.fork && rl.fresh) {
    rl.speedup = rl.fresh.wallMs / rl.fork.totalMs;
    rl.speedupForkOnly = rl.fresh.wallMs / rl.fork.forkUntilAnsweredMs;
  }
}

const started = Date.now();
const report: CodeInterpreterReport = {
  meta: hostMeta({
    template: TEMPLATE,
    n: N,
    roundTripN: RT_N,
    forks: FORKS,
    freshConcurrency: FRESH_CONCURRENCY,
    dataFrameRows: DF_ROWS,
    poolSize: POOL,
    smoke: SMOKE ? "yes" : "no",
  }),
  targets: [],
  errors: [],
};
try {
  await main(report);
} catch (err) {
  report.errors.push((err as Error).message);
  log(`aborted: ${(err as Error).message}`);
} finally {
  await cleanup();
}
report.targets = targets(report);
finishMeta(report.meta, started);
const notes = [
  `create → first runCode: a server whose warm pool holds ${POOL} ${TEMPLATE} sandboxes, full before each create; the sandbox killed after (untimed)`,
  "round trip baseline: the template's jupyter-server and python3 kernel chrooted on the host (no gVisor), execute_request → execute_reply + idle over its WebSocket, alternating with the aenv samples",
  `RL figure: a server with no warm pool; fresh sandboxes ${FRESH_CONCURRENCY} at a time (2 cores), each kept until all are done, as fork's children are`,
];
mkdirSync(RESULTS, { recursive: true });
writeFileSync(join(RESULTS, "code-interpreter-latest.json"), `${JSON.stringify(report, null, 2)}\n`);
const md = markdown(report, notes);
writeFileSync(join(RESULTS, "code-interpreter-latest.md"), md);
console.log(md);
process.exit(report.errors.length ? 1 : 0);
