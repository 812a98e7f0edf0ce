/**
 * RL-rollout benchmark: how many rollouts of a task with an expensive setup fit in a fixed
 * wall-clock budget, two ways, through the unmodified e2b SDK.
 *
 * The task (bench/rollout-task.py, python3 + git only, no network): setup generates a git
 * project of a few thousand modules with a few hundred commits, byte-compiles it, builds a
 * token index and analysis state, and repeats the analysis until BENCH_ROLLOUT_SETUP_S have
 * passed. A rollout hashes the prepared tree, then reads the index, greps the tree, edits and
 * commits a few files chosen by its seed, imports them and writes a result file.
 *
 *   setupPerRollout   create → write task → setup → rollout → kill, BENCH_ROLLOUT_CONCURRENCY at once
 *   forkFromPrepared  create → setup once → pause, then fork() children of the paused parent up
 *                     to BENCH_ROLLOUT_FORKS live (plus BENCH_ROLLOUT_PREFORK forked ahead and
 *                     waiting), a rollout in each, killed when done, more forked while the
 *                     budget lasts (a paused parent's children restore from its pause image: no
 *                     capture per fork call, and the parent uses no CPU)
 *
 * One busy sandbox at a time by default, for both: on this 2-core host gVisor's systrap makes
 * concurrently busy sandboxes slow each other down by more than their share (see
 * docs/architecture.md), and both strategies did as well or better one at a time.
 *
 * The budget covers everything from the first create, the parent's setup included. Only
 * rollouts finished inside it count; whatever runs at the deadline is killed. Each fork child's
 * tree hash must equal the parent's (byte-identical start), and results must all differ
 * (seeds diverge). Writes bench/results/rollouts-latest.{json,md}.
 *
 *   node --import tsx bench/rollouts.ts        (part of `npm run bench`)
 *
 * Env: BENCH_ROLLOUT_BUDGET_S (per strategy, 120), BENCH_ROLLOUT_SETUP_S (minimum setup, 20),
 * BENCH_ROLLOUT_FILES (2000), BENCH_ROLLOUT_COMMITS (50), BENCH_ROLLOUT_CONCURRENCY (1),
 * BENCH_ROLLOUT_FORKS (children running rollouts at once, 1), BENCH_ROLLOUT_PREFORK (children
 * forked ahead, 1; 0 forks only when a slot is free), BENCH_ROLLOUT_PAUSE_PARENT (1; 0 forks the
 * running parent, captured again at every fork call), BENCH_NET_PREFIX / BENCH_SLOT_CIDR (aer, 10.212.0.0/16);
 * BENCH_SMOKE=1 makes the defaults tiny (20 s budgets, 0.5 s setup, 40 files, 2 commits, 2 forks).
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "../test/helpers/server.js";
import { type CpuMark, cpuMark, cpuSince } from "./cpu.js";
import { benchLog, envNum, finishMeta, hostMeta } from "./meta.js";
import { RESULTS } from "./paths.js";
import {
  type ForkFromPrepared,
  markdown,
  type Report,
  type Rollout,
  type RolloutResult,
  type SetupPerRollout,
  type StrategyResult,
} from "./rollouts-report.js";
import { mean, summarize } from "./stats.js";

// BENCH_SMOKE=1: tiny defaults (what test/bench-smoke.test.ts runs), each still overridable.
const SMOKE = process.env.BENCH_SMOKE === "1";
const BUDGET_S = envNum("BENCH_ROLLOUT_BUDGET_S", SMOKE ? 20 : 120, true);
const SETUP_S = envNum("BENCH_ROLLOUT_SETUP_S", SMOKE ? 0.5 : 20, true);
const FILES = envNum("BENCH_ROLLOUT_FILES", SMOKE ? 40 : 2000);
const COMMITS = envNum("BENCH_ROLLOUT_COMMITS", SMOKE ? 2 : 50);
const CONCURRENCY = envNum("BENCH_ROLLOUT_CONCURRENCY", SMOKE ? 2 : 1);
const FORKS = envNum("BENCH_ROLLOUT_FORKS", SMOKE ? 2 : 1);
const PREFORK = process.env.BENCH_ROLLOUT_PREFORK === "0" ? 0 : envNum("BENCH_ROLLOUT_PREFORK", SMOKE ? 0 : 1);
const PAUSE_PARENT = process.env.BENCH_ROLLOUT_PAUSE_PARENT !== "0";

const TASK = "/home/user/prep/task.py";
const WORK = "/home/user/work";
const RESULT = "/home/user/result.json";
const SANDBOX_TIMEOUT_MS = (BUDGET_S + 600) * 1000;
const CMD_TIMEOUT_MS = 600_000;

const log = benchLog("rollouts");
const taskSource = readFileSync(join(import.meta.dirname, "rollout-task.py"), "utf8");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t = performance.now();
  const v = await fn();
  return [v, performance.now() - t];
}

async function prepare(s: Sandbox): Promise<number> {
  await s.files.write(TASK, taskSource);
  const [r, ms] = await timed(() =>
    s.commands.run(
      `python3 ${TASK} setup --root ${WORK} --files ${FILES} --commits ${COMMITS} --min-seconds ${SETUP_S}`,
      { timeoutMs: CMD_TIMEOUT_MS },
    ),
  );
  log(`setup in ${(ms / 1000).toFixed(1)} s: ${r.stdout.trim()}`);
  return ms / 1000;
}

async function treeHash(s: Sandbox): Promise<{ sha256: string; files: number }> {
  const r = await s.commands.run(`python3 ${TASK} hash --root ${WORK}`, { timeoutMs: CMD_TIMEOUT_MS });
  return JSON.parse(r.stdout) as { sha256: string; files: number };
}

/** The rollout proper: a few commands on the prepared state, then its result file read back. */
async function runRollout(s: Sandbox, seed: number): Promise<{ result: RolloutResult; ms: number }> {
  const [, ms] = await timed(() =>
    s.commands.run(`python3 ${TASK} rollout --root ${WORK} --seed ${seed} --out ${RESULT}`, {
      timeoutMs: CMD_TIMEOUT_MS,
    }),
  );
  const result = JSON.parse(await s.files.read(RESULT)) as RolloutResult;
  if (result.seed !== seed) throw new Error(`result file has seed ${result.seed}, expected ${seed}`);
  return { result, ms };
}

function finish<T extends StrategyResult>(
  base: Omit<T, keyof StrategyResult>,
  done: Rollout[],
  setups: number[],
  creates: number[],
  cut: number,
  errors: string[],
): T {
  const distinct = new Set(done.map((r) => r.result.diffSha256)).size;
  return {
    ...base,
    budgetS: BUDGET_S,
    rollouts: done.length,
    rolloutsPerHour: (done.length * 3600) / BUDGET_S,
    cutAtDeadline: cut,
    setupS: summarize(setups),
    createMs: summarize(creates),
    hashMs: summarize(done.map((r) => r.hashMs)),
    rolloutMs: summarize(done.map((r) => r.rolloutMs)),
    perRolloutMs: summarize(done.map((r) => r.totalMs)),
    distinctResults: distinct,
    resultsDiverge: done.length > 0 && distinct === done.length,
    errors,
  } as T;
}

/** aenv-server's PID, for the CPU split. */
let serverPid: number | undefined;

/** Everything alive, so the deadline (or a failure) can kill it. */
const live = new Set<Sandbox>();
const killQuietly = async (s: Sandbox) => {
  live.delete(s);
  await s.kill().catch(() => {});
};

async function setupPerRollout(): Promise<SetupPerRollout> {
  const cpu0 = cpuMark(serverPid);
  const t0 = performance.now();
  const deadline = t0 + BUDGET_S * 1000;
  const done: Rollout[] = [];
  const setups: number[] = [];
  const creates: number[] = [];
  const errors: string[] = [];
  let seed = 0;
  let cut = 0;
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    cut = live.size;
    for (const s of [...live]) void killQuietly(s);
  }, BUDGET_S * 1000);

  const worker = async () => {
    while (!expired) {
      const my = ++seed;
      const start = performance.now();
      let s: Sandbox | undefined;
      try {
        const [sbx, createMs] = await timed(() => Sandbox.create({ timeoutMs: SANDBOX_TIMEOUT_MS }));
        s = sbx;
        live.add(s);
        if (expired) break;
        const setupS = await prepare(s);
        const [, hashMs] = await timed(() => treeHash(sbx));
        const { result, ms } = await runRollout(s, my);
        const now = performance.now();
        if (now > deadline) break;
        creates.push(createMs);
        setups.push(setupS);
        done.push({ seed: my, doneAtS: (now - t0) / 1000, totalMs: now - start, hashMs, rolloutMs: ms, result });
        log(`setupPerRollout: rollout ${my} done at ${((now - t0) / 1000).toFixed(1)} s`);
      } catch (err) {
        if (!expired) errors.push(`rollout ${my}: ${(err as Error).message}`);
      } finally {
        if (s) await killQuietly(s);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  } finally {
    clearTimeout(timer);
  }
  const res = finish<SetupPerRollout>(
    { concurrency: CONCURRENCY, steadyStateRolloutsPerHour: 0 },
    done,
    setups,
    creates,
    cut,
    errors,
  );
  res.cpu = { ...cpuSince(cpu0, cpuMark(serverPid)), rollouts: done.length };
  const per = mean(done.map((r) => r.totalMs));
  res.steadyStateRolloutsPerHour = done.length ? (CONCURRENCY * 3_600_000) / per : 0;
  return res;
}

async function forkFromPrepared(): Promise<ForkFromPrepared> {
  const t0 = performance.now();
  const deadline = t0 + BUDGET_S * 1000;
  const done: Rollout[] = [];
  const errors: string[] = [];
  const forkMs: number[] = [];
  let forkCalls = 0;
  let forked = 0;
  let identical = 0;
  let checked = 0;
  let seed = 1_000_000;
  let expired = false;
  let cut = 0;

  const [parent, createMs] = await timed(() => Sandbox.create({ timeoutMs: SANDBOX_TIMEOUT_MS }));
  live.add(parent);
  const inflight = new Set<Promise<void>>();
  let setupS = 0;
  let parentPauseMs = 0;
  let cpu0: CpuMark | undefined;
  let ref = { sha256: "", files: 0 };
  const timer = setTimeout(() => {
    expired = true;
    cut = [...live].filter((s) => s !== parent).length;
    for (const s of [...live]) if (s !== parent) void killQuietly(s);
  }, BUDGET_S * 1000);
  try {
    setupS = await prepare(parent);
    ref = await treeHash(parent);
    log(`parent tree ${ref.sha256.slice(0, 16)}… (${ref.files} files)`);
    if (PAUSE_PARENT) [, parentPauseMs] = await timed(() => parent.pause());
    cpu0 = cpuMark(serverPid);

    const child = async (s: Sandbox, forkStart: number) => {
      const my = ++seed;
      try {
        const [h, hashMs] = await timed(() => treeHash(s));
        checked++;
        if (h.sha256 === ref.sha256) identical++;
        else errors.push(`child of seed ${my}: tree ${h.sha256} differs from the parent's ${ref.sha256}`);
        const { result, ms } = await runRollout(s, my);
        const now = performance.now();
        if (now > deadline) return;
        done.push({ seed: my, doneAtS: (now - t0) / 1000, totalMs: now - forkStart, hashMs, rolloutMs: ms, result });
      } catch (err) {
        if (!expired) errors.push(`child rollout ${my}: ${(err as Error).message}`);
      } finally {
        await killQuietly(s);
      }
    };

    // Children forked ahead (PREFORK) wait here, restored, until a rollout slot frees up:
    // the next child's restore overlaps the current rollout instead of following it.
    const ready: Array<{ s: Sandbox; forkStart: number }> = [];
    let forking: Promise<void> | undefined;
    let failedForks = 0;
    const forkMore = () => {
      const want = FORKS + PREFORK - inflight.size - ready.length;
      if (forking || expired || want <= 0) return;
      // Fork in batches: each call links the paused parent's image (or checkpoints a running
      // parent) once, however many children.
      if (want < Math.ceil(FORKS / 2) && inflight.size + ready.length > 0) return;
      const forkStart = performance.now();
      forking = parent
        .fork({ count: want, timeoutMs: SANDBOX_TIMEOUT_MS })
        .then(
          (kids) => kids,
          (err: unknown) => [err as Error],
        )
        .then(async (kids) => {
          forkCalls++;
          forkMs.push(performance.now() - forkStart);
          let started = 0;
          for (const k of kids) {
            if (k instanceof Error) {
              if (!expired) errors.push(`fork: ${k.message}`);
              continue;
            }
            forked++;
            started++;
            live.add(k);
            if (expired) void killQuietly(k);
            else ready.push({ s: k, forkStart });
          }
          if (started) failedForks = 0;
          else if (++failedForks >= 3) throw new Error("three fork calls in a row started no child");
          else await sleep(500);
        })
        .finally(() => {
          forking = undefined;
        });
    };
    while (!expired && performance.now() < deadline) {
      forkMore();
      while (inflight.size < FORKS && ready.length) {
        const next = ready.shift();
        if (!next) break;
        const p: Promise<void> = child(next.s, next.forkStart).finally(() => inflight.delete(p));
        inflight.add(p);
      }
      await Promise.race([
        ...inflight,
        ...(forking ? [forking] : []),
        sleep(Math.max(0, deadline - performance.now())),
      ]);
    }
    await forking?.catch(() => {});
    for (const r of ready.splice(0)) await killQuietly(r.s);
    await Promise.all(inflight);
  } finally {
    clearTimeout(timer);
    if (!expired) cut = 0;
    await killQuietly(parent);
  }
  const forkPhase = cpu0 && cpuSince(cpu0, cpuMark(serverPid));
  const res = finish<ForkFromPrepared>(
    {
      forksLive: FORKS,
      parentPaused: PAUSE_PARENT,
      parentPauseMs,
      forkCalls,
      forkMs: summarize(forkMs),
      childrenForked: forked,
      parentTreeSha256: ref.sha256,
      treeFiles: ref.files,
      identicalChildren: identical,
      checkedChildren: checked,
    },
    done,
    [setupS],
    [createMs],
    cut,
    errors,
  );
  // Every rollout of this strategy ran in a child, after the mark.
  if (forkPhase) res.cpu = { ...forkPhase, rollouts: done.length };
  return res;
}

async function main(): Promise<number> {
  const started = Date.now();
  const report: Report = {
    meta: hostMeta({
      budgetS: BUDGET_S,
      smoke: SMOKE ? "yes" : "no",
      minSetupS: SETUP_S,
      files: FILES,
      commits: COMMITS,
      concurrency: CONCURRENCY,
      forksLive: FORKS,
      prefork: PREFORK,
      pauseParent: PAUSE_PARENT ? "yes" : "no",
    }),
    speedup: null,
    speedupVsSteadyState: null,
    errors: [],
  };
  let server: TestServer | undefined;
  const stop = async () => {
    for (const s of [...live]) await killQuietly(s);
    if (server) {
      await server.stop();
      cleanupDataDir(server);
      server = undefined;
    }
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const)
    process.once(sig, () => void stop().finally(() => process.exit(130)));
  try {
    server = await startServer({
      env: {
        AENV_NET_PREFIX: process.env.BENCH_NET_PREFIX ?? "aer",
        AENV_SLOT_CIDR: process.env.BENCH_SLOT_CIDR ?? "10.212.0.0/16",
        AENV_LOG_LEVEL: "warn",
      },
    });
    useE2b(server);
    serverPid = server.proc.pid;
    const details = (await server.api("GET", "/health/details")).body as { runtime?: { platform?: string } };
    report.meta.platform = details.runtime?.platform ?? "unknown";
    // Creates are restores of the template's warm image once it exists.
    await sleep(SMOKE ? 1000 : 5000);
    log(`setupPerRollout: ${BUDGET_S} s, ${CONCURRENCY} at once`);
    report.setupPerRollout = await setupPerRollout();
    report.errors.push(...report.setupPerRollout.errors.map((e) => `setupPerRollout: ${e}`));
    log(`forkFromPrepared: ${BUDGET_S} s, ${FORKS} children live`);
    report.forkFromPrepared = await forkFromPrepared();
    report.errors.push(...report.forkFromPrepared.errors.map((e) => `forkFromPrepared: ${e}`));
  } catch (err) {
    report.errors.push((err as Error).message);
  } finally {
    await stop();
  }
  const a = report.setupPerRollout;
  const b = report.forkFromPrepared;
  if (a && b && a.rolloutsPerHour > 0) report.speedup = b.rolloutsPerHour / a.rolloutsPerHour;
  if (a && b && a.steadyStateRolloutsPerHour > 0)
    report.speedupVsSteadyState = b.rolloutsPerHour / a.steadyStateRolloutsPerHour;
  if (b && b.identicalChildren !== b.checkedChildren) report.errors.push("forked children did not start identical");
  for (const [name, s] of [
    ["setupPerRollout", a],
    ["forkFromPrepared", b],
  ] as const) {
    if (s && s.rollouts > 0 && !s.resultsDiverge) report.errors.push(`${name}: rollouts' results did not all differ`);
    if (s && s.rollouts === 0) report.errors.push(`${name}: no rollout finished inside the budget`);
  }
  finishMeta(report.meta, started);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "rollouts-latest.json"), `${JSON.stringify(report, null, 2)}\n`);
  const md = markdown(report);
  writeFileSync(join(RESULTS, "rollouts-latest.md"), md);
  console.log(md);
  return report.errors.length ? 1 : 0;
}

process.exit(await main());
