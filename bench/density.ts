/**
 * Density probe: N idle sandboxes on one host, N stepping up (10, 20, 40 by default), aenv
 * through the e2b SDK beside raw runsc `sleep infinity` sandboxes (see raw-runsc.ts). At each
 * step, after the sandboxes settle, an idle window measures:
 *
 * - host CPU from /proc/stat (all work on the host, others' included) and, against a window
 *   with none of ours running, the part above that baseline;
 * - CPU of the sandboxes' own host processes (sentry, gofer, systrap stubs: utime + stime),
 *   which other load on the host does not blur, and for aenv the server's (its reaped children
 *   included: the runsc CLI calls it makes);
 * - MemAvailable drop per sandbox since before the first one, and PSS per sandbox;
 * - then every sandbox must still answer a command.
 *
 * A step whose sandboxes would leave less than BENCH_DENSITY_RESERVE_MIB available (estimated
 * from the previous step) is skipped. Writes bench/results/density-latest.{json,md}.
 *
 *   node --import tsx bench/density.ts        (part of `npm run bench`)
 *
 * Env: BENCH_DENSITY_STEPS ("10,20,40"), BENCH_DENSITY_HIBERNATE_STEPS (the pass with
 * hibernation: "10,20,40,100,200"), BENCH_DENSITY_SAVE_S (20; the pass whose frozen sandboxes
 * are also saved to disk, 0 skips it) and BENCH_DENSITY_SAVED_STEPS ("10,40,100"); an empty
 * step list skips its pass. BENCH_DENSITY_WINDOW_S (30), BENCH_DENSITY_RAW (1; 0
 * skips raw runsc), BENCH_DENSITY_RESERVE_MIB (2048), BENCH_RAW_OVERLAY (memory | dir),
 * BENCH_NET_PREFIX / BENCH_SLOT_CIDR (aer, 10.212.0.0/16); BENCH_SMOKE=1 makes the defaults tiny
 * (one step of 1, 1 s windows).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "../test/helpers/server.js";
import { CLK_TCK, hostTicks, procTicks } from "./cpu.js";
import { type BenchMeta, benchLog, envNum, finishMeta, hostMeta } from "./meta.js";
import { RESULTS, templateRootfs } from "./paths.js";
import { listProcs, memAvailableKiB, memAvailableMiB, sandboxesPss, sandboxPids } from "./procmem.js";
import { RawRunsc } from "./raw-runsc.js";
import { metaLines } from "./report.js";
import { mean } from "./stats.js";

// BENCH_SMOKE=1: tiny defaults (what test/bench-smoke.test.ts runs), each still overridable.
const SMOKE = process.env.BENCH_SMOKE === "1";
const STEPS = (process.env.BENCH_DENSITY_STEPS ?? (SMOKE ? "1" : "10,20,40"))
  .split(",")
  .map(Number)
  .filter((n) => Number.isInteger(n) && n > 0)
  .sort((a, b) => a - b);
const WINDOW_S = envNum("BENCH_DENSITY_WINDOW_S", SMOKE ? 1 : 30, true);
/** The second aenv pass freezes idle sandboxes after this many seconds (0 skips that pass). */
const HIBERNATE_S = envNum("BENCH_DENSITY_HIBERNATE_S", SMOKE ? 1 : 10, true);
/** The hibernating pass goes further: idle sandboxes there cost memory, not CPU. */
const HIBERNATE_STEPS = (process.env.BENCH_DENSITY_HIBERNATE_STEPS ?? (SMOKE ? "1" : "10,20,40,100,200"))
  .split(",")
  .map(Number)
  .filter((n) => Number.isInteger(n) && n > 0)
  .sort((a, b) => a - b);
/** The third aenv pass also saves frozen sandboxes to disk after this many idle seconds (0 skips it). */
// envNum takes 0 for "unset": an explicit 0 must skip the pass, as documented.
const SAVE_S = process.env.BENCH_DENSITY_SAVE_S === "0" ? 0 : envNum("BENCH_DENSITY_SAVE_S", SMOKE ? 0 : 20, true);
const SAVED_STEPS = (process.env.BENCH_DENSITY_SAVED_STEPS ?? "10,40,100")
  .split(",")
  .map(Number)
  .filter((n) => Number.isInteger(n) && n > 0)
  .sort((a, b) => a - b);
const WITH_RAW = process.env.BENCH_DENSITY_RAW !== "0";
const RESERVE_MIB = envNum("BENCH_DENSITY_RESERVE_MIB", 2048);
const RAW_OVERLAY = process.env.BENCH_RAW_OVERLAY === "dir" ? "dir" : "memory";
const SETTLE_MS = SMOKE ? 500 : 3000;
const NCPU = cpus().length;

const log = benchLog("density");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function pidsOf(ids: readonly string[]): number[] {
  const procs = listProcs();
  return ids.flatMap((id) => sandboxPids(id, procs));
}

interface Window {
  /** Host CPU busy over the window, in cores (1.0 = one core fully busy). */
  hostBusyCores: number;
  /** CPU of the sandboxes' own processes, in cores. */
  sandboxCores: number;
  serverCores?: number;
}

/** An idle window of WINDOW_S: host CPU, and the CPU of the given sandboxes' processes. */
async function measureWindow(ids: readonly string[], serverPid?: number): Promise<Window> {
  const startPids = pidsOf(ids);
  const startTicks = new Map(startPids.map((p) => [p, procTicks(p) ?? 0]));
  const server0 = serverPid ? procTicks(serverPid, true) : undefined;
  const h0 = hostTicks();
  const t0 = performance.now();
  await sleep(WINDOW_S * 1000);
  const seconds = (performance.now() - t0) / 1000;
  const h1 = hostTicks();
  const server1 = serverPid ? procTicks(serverPid, true) : undefined;
  let sandboxTicks = 0;
  // Processes born during the window count whole; those that died in it are lost (rare when idle).
  for (const p of pidsOf(ids)) sandboxTicks += (procTicks(p) ?? 0) - (startTicks.get(p) ?? 0);
  const w: Window = {
    hostBusyCores: ((h1.busy - h0.busy) / Math.max(1, h1.total - h0.total)) * NCPU,
    sandboxCores: sandboxTicks / CLK_TCK / seconds,
  };
  if (server0 !== undefined && server1 !== undefined) w.serverCores = (server1 - server0) / CLK_TCK / seconds;
  return w;
}

interface Step {
  sandboxes: number;
  /** Mean time to start each sandbox added at this step. */
  createMs: number;
  hostBusyCores: number;
  /** (host busy − baseline busy) / sandboxes, in % of one core: blurred by others' load. */
  hostCpuOverBaselinePctPerSandbox: number;
  sandboxCpuPctPerSandbox: number;
  serverCpuPct?: number;
  memAvailableDropMiBPerSandbox: number;
  pssMiBPerSandbox: number;
  answered: number;
}

interface Side {
  steps: Step[];
  /** Steps left out because the host would have run short of memory. */
  skipped: number[];
  memAvailableMiB: { before: number; afterTeardown?: number };
}

interface Driver {
  start(): Promise<string>;
  answers(id: string): Promise<boolean>;
  destroyAll(): Promise<void>;
  serverPid?: number;
}

async function probe(
  name: string,
  d: Driver,
  baseline: Window,
  errors: string[],
  settleMs: (sandboxes: number) => number = () => SETTLE_MS,
  steps = STEPS,
): Promise<Side> {
  const ids: string[] = [];
  const before = await memAvailableMiB();
  const side: Side = { steps: [], skipped: [], memAvailableMiB: { before } };
  let perSandboxMiB = 150; // a first guess until a step has measured it
  try {
    for (const target of steps) {
      const avail = memAvailableKiB() / 1024;
      if (avail - (target - ids.length) * perSandboxMiB < RESERVE_MIB) {
        log(`${name}: skipping ${target}: ${avail.toFixed(0)} MiB available, ~${perSandboxMiB.toFixed(0)} MiB each`);
        side.skipped.push(target);
        continue;
      }
      log(`${name}: starting ${target - ids.length} more (to ${target})`);
      const t = performance.now();
      const added = target - ids.length;
      while (ids.length < target) ids.push(await d.start());
      const createMs = (performance.now() - t) / added;
      await sleep(settleMs(target));
      log(`${name}: ${target} idle, measuring ${WINDOW_S} s`);
      const w = await measureWindow(ids, d.serverPid);
      const up = await memAvailableMiB();
      const pss = sandboxesPss(ids);
      let answered = 0;
      for (let i = 0; i < ids.length; i += 4) {
        const batch = ids.slice(i, i + 4);
        const ok = await Promise.all(batch.map((id) => d.answers(id).catch(() => false)));
        answered += ok.filter(Boolean).length;
      }
      if (answered !== ids.length) errors.push(`${name}: ${ids.length - answered} of ${ids.length} did not answer`);
      const drop = (before - up) / target;
      if (drop > 0) perSandboxMiB = Math.max(drop, 30);
      const step: Step = {
        sandboxes: target,
        createMs,
        hostBusyCores: w.hostBusyCores,
        hostCpuOverBaselinePctPerSandbox: ((w.hostBusyCores - baseline.hostBusyCores) / target) * 100,
        sandboxCpuPctPerSandbox: (w.sandboxCores / target) * 100,
        memAvailableDropMiBPerSandbox: drop,
        pssMiBPerSandbox: mean(pss.map((p) => p.pssKiB / 1024)),
        answered,
      };
      if (w.serverCores !== undefined) step.serverCpuPct = w.serverCores * 100;
      side.steps.push(step);
      log(
        `${name}: ${target}: sandbox CPU ${step.sandboxCpuPctPerSandbox.toFixed(2)} %/sandbox, ` +
          `host ${w.hostBusyCores.toFixed(2)} cores, ${drop.toFixed(1)} MiB/sandbox, ${answered}/${target} answered`,
      );
    }
  } catch (err) {
    // The steps measured so far stand; the one that failed is reported.
    errors.push(`${name}: ${(err as Error).message}`);
  } finally {
    await d.destroyAll();
  }
  await sleep(1500);
  side.memAvailableMiB.afterTeardown = await memAvailableMiB();
  return side;
}

interface Report {
  meta: BenchMeta;
  baseline: Window & { windowS: number };
  aenv?: Side;
  /** The same with hibernation: idle sandboxes frozen after HIBERNATE_S. */
  aenvHibernating?: Side;
  /** And saved to disk (memory given back) after SAVE_S idle. */
  aenvSaved?: Side;
  raw?: Side;
  errors: string[];
}

const fmt = (v: number | undefined, d: number) => (v === undefined || Number.isNaN(v) ? "–" : v.toFixed(d));
const ratio = (a: number | undefined, b: number | undefined) =>
  a === undefined || b === undefined || !b || Number.isNaN(a) ? "–" : `${(a / b).toFixed(2)}×`;

function markdown(r: Report): string {
  const lines = [
    "# aenv density probe",
    "",
    ...metaLines(r.meta).map((l) => `- ${l}`),
    `- commit: ${r.meta.commit}`,
    `- baseline (none of ours running), host CPU busy: ${r.baseline.hostBusyCores.toFixed(2)} cores over ${r.baseline.windowS} s`,
    "",
    `| metric | aenv (e2b SDK) | aenv, hibernating after ${HIBERNATE_S} s | aenv, saved to disk after ${SAVE_S} s | raw runsc | aenv / raw | hibernating / raw | saved / raw |`,
    "|:--|--:|--:|--:|--:|--:|--:|--:|",
  ];
  const ns = [
    ...new Set([r.aenv, r.aenvHibernating, r.aenvSaved, r.raw].flatMap((x) => x?.steps ?? []).map((s) => s.sandboxes)),
  ];
  for (const n of ns.sort((a, b) => a - b)) {
    const a = r.aenv?.steps.find((s) => s.sandboxes === n);
    const h = r.aenvHibernating?.steps.find((s) => s.sandboxes === n);
    const v = r.aenvSaved?.steps.find((s) => s.sandboxes === n);
    const b = r.raw?.steps.find((s) => s.sandboxes === n);
    const pick = <K extends keyof Step>(x: Step | undefined, k: K) => x?.[k] as number | undefined;
    const row = (label: string, k: keyof Step, d: number) =>
      lines.push(
        `| ${label} | ${fmt(pick(a, k), d)} | ${fmt(pick(h, k), d)} | ${fmt(pick(v, k), d)} | ${fmt(pick(b, k), d)} | ${ratio(pick(a, k), pick(b, k))} | ${ratio(pick(h, k), pick(b, k))} | ${ratio(pick(v, k), pick(b, k))} |`,
      );
    row(`N=${n}: start, mean per sandbox (ms)`, "createMs", 0);
    row(`N=${n}: sandboxes' own CPU, per sandbox (% of a core)`, "sandboxCpuPctPerSandbox", 2);
    row(`N=${n}: aenv-server CPU (% of a core)`, "serverCpuPct", 2);
    row(`N=${n}: host CPU busy (cores, all load)`, "hostBusyCores", 2);
    row(`N=${n}: host CPU over baseline, per sandbox (% of a core)`, "hostCpuOverBaselinePctPerSandbox", 2);
    row(`N=${n}: MemAvailable drop per sandbox (MiB)`, "memAvailableDropMiBPerSandbox", 1);
    row(`N=${n}: PSS per sandbox (MiB)`, "pssMiBPerSandbox", 1);
    lines.push(
      `| N=${n}: answering a command at the end | ${[a, h, v, b].map((x) => (x ? `${x.answered}/${n}` : "–")).join(" | ")} | | | |`,
    );
  }
  const skipped = [
    ...(r.aenv?.skipped ?? []).map((n) => `aenv ${n}`),
    ...(r.aenvHibernating?.skipped ?? []).map((n) => `aenv hibernating ${n}`),
    ...(r.aenvSaved?.skipped ?? []).map((n) => `aenv saved ${n}`),
    ...(r.raw?.skipped ?? []).map((n) => `raw ${n}`),
  ];
  if (skipped.length) lines.push("", `Skipped for lack of memory: ${skipped.join(", ")}.`);
  lines.push("");
  if (r.errors.length) lines.push("Errors:", "", ...r.errors.map((e) => `- ${e}`), "");
  return lines.join("\n");
}

async function main(): Promise<number> {
  const started = Date.now();
  const report: Report = {
    meta: hostMeta({
      smoke: SMOKE ? "yes" : "no",
      steps: STEPS.join(","),
      hibernatingSteps: HIBERNATE_STEPS.join(","),
      savedSteps: SAVED_STEPS.join(","),
      saveS: SAVE_S,
      windowS: WINDOW_S,
      settleMs: SETTLE_MS,
      reserveMiB: RESERVE_MIB,
      raw: WITH_RAW ? `yes, overlay ${RAW_OVERLAY}` : "no",
      clkTck: CLK_TCK,
    }),
    baseline: { hostBusyCores: 0, sandboxCores: 0, windowS: WINDOW_S },
    errors: [],
  };
  let server: TestServer | undefined;
  const sandboxes: Sandbox[] = [];
  let raw: RawRunsc | undefined;
  const stop = async () => {
    await Promise.all(sandboxes.splice(0).map((s) => s.kill().catch(() => {})));
    if (server) {
      await server.stop();
      cleanupDataDir(server);
      server = undefined;
    }
    await raw?.cleanup();
    raw = undefined;
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const)
    process.once(sig, () => void stop().finally(() => process.exit(130)));
  try {
    log(`baseline: ${WINDOW_S} s with none of ours running`);
    report.baseline = { ...(await measureWindow([])), windowS: WINDOW_S };
    const passes = [
      { key: "aenv", hibernate: 0, save: 0, steps: STEPS },
      { key: "aenvHibernating", hibernate: HIBERNATE_S, save: 0, steps: HIBERNATE_S ? HIBERNATE_STEPS : [] },
      { key: "aenvSaved", hibernate: HIBERNATE_S || 1, save: SAVE_S, steps: SAVE_S ? SAVED_STEPS : [] },
    ] as const;
    for (const pass of passes) {
      if (!pass.steps.length) continue;
      const hibernate = pass.hibernate;
      server = await startServer({
        env: {
          AENV_NET_PREFIX: process.env.BENCH_NET_PREFIX ?? "aer",
          AENV_SLOT_CIDR: process.env.BENCH_SLOT_CIDR ?? "10.212.0.0/16",
          AENV_LOG_LEVEL: "warn",
          AENV_HIBERNATE_AFTER: String(hibernate),
          AENV_HIBERNATE_SAVE_AFTER: String(pass.save),
          AENV_WARM_POOL_MAX: "0",
          // Admission counts each sandbox's ceilings (1 GiB, 2 vCPUs); 200 idle ones touch ~6 GiB
          // and, frozen, no CPU.
          AENV_MAX_MEMORY_MB: String(1 << 20),
          AENV_MAX_CPUS: String(4096),
        },
      });
      useE2b(server);
      const details = (await server.api("GET", "/health/details")).body as { runtime?: { platform?: string } };
      report.meta.platform = details.runtime?.platform ?? "unknown";
      await sleep(SETTLE_MS);
      const byId = new Map<string, Sandbox>();
      try {
        const side = await probe(
          pass.key,
          {
            serverPid: server.proc.pid,
            async start() {
              const s = await Sandbox.create({ timeoutMs: 3_600_000 });
              sandboxes.push(s);
              byId.set(s.sandboxId, s);
              return s.sandboxId;
            },
            async answers(id) {
              const r = await byId.get(id)?.commands.run("echo ok", { timeoutMs: 60_000 });
              return r?.stdout === "ok\n";
            },
            async destroyAll() {
              await Promise.all(sandboxes.splice(0).map((s) => s.kill().catch(() => {})));
            },
          },
          report.baseline,
          report.errors,
          // Hibernating: the window starts once every idle sandbox has been frozen; saving: once
          // each has been saved (one at a time, ~0.3 s each, those the last step's check woke too).
          (n) => SETTLE_MS + (hibernate ? (hibernate + 3) * 1000 : 0) + (pass.save ? pass.save * 1000 + n * 400 : 0),
          pass.steps,
        );
        report[pass.key] = side;
      } catch (err) {
        report.errors.push(`aenv: ${(err as Error).message}`);
      }
      await server.stop();
      cleanupDataDir(server);
      server = undefined;
    }
    if (WITH_RAW) {
      const r = new RawRunsc({ rootfs: templateRootfs(), platform: report.meta.platform, overlay: RAW_OVERLAY });
      raw = r;
      try {
        report.raw = await probe(
          "raw",
          {
            async start() {
              const id = r.newId();
              await r.start(id);
              return id;
            },
            async answers(id) {
              return (await r.exec(id, ["/bin/echo", "ok"])).stdout.toString() === "ok\n";
            },
            async destroyAll() {
              // A few at a time: one by one, 40 `runsc delete`s took two minutes here.
              const ids = r.liveIds();
              for (let i = 0; i < ids.length; i += 8) await Promise.all(ids.slice(i, i + 8).map((id) => r.delete(id)));
            },
          },
          report.baseline,
          report.errors,
        );
      } catch (err) {
        report.errors.push(`raw: ${(err as Error).message}`);
      }
    }
  } catch (err) {
    report.errors.push((err as Error).message);
  } finally {
    await stop();
  }
  for (const side of [report.aenv, report.aenvHibernating, report.aenvSaved, report.raw])
    if (side && side.steps.length === 0) report.errors.push("no step ran");
  finishMeta(report.meta, started);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "density-latest.json"), `${JSON.stringify(report, null, 2)}\n`);
  const md = markdown(report);
  writeFileSync(join(RESULTS, "density-latest.md"), md);
  console.log(md);
  return report.errors.length ? 1 : 0;
}

process.exit(await main());
