/**
 * Computer use: the unmodified @e2b/desktop SDK against a real aenv-server and the `desktop`
 * template, restored from its warm image (the warm pool off: every create is a restore).
 *
 * 1. memory of K idle desktops on the host, as bench/run.ts and bench/density.ts measure a
 *    sandbox (PSS of its runsc processes, MemAvailable drop): running, frozen by hibernation,
 *    and saved to disk by the idle save (first: later steps leave memory the server frees late);
 * 2. create → first `screenshot()`, each desktop killed after (untimed), after 1 warm-up;
 * 3. `screenshot()` round trips on one desktop;
 * 4. `fork({count: N})` of that desktop with Firefox open on a page served inside it
 *    (`python3 -m http.server`), until every child's `screenshot()` answered.
 *
 *   node --import tsx bench/desktop.ts        (part of `npm run bench`)
 *
 * Env: BENCH_DESKTOP_CREATES (6), BENCH_DESKTOP_SHOTS (20), BENCH_DESKTOP_FORKS (4),
 * BENCH_DESKTOP_MEM_K (2), BENCH_DESKTOP_SETTLE_S (8: idle before the running reading),
 * BENCH_DESKTOP_HIBERNATE_S (20: the server's hibernate_after), BENCH_DESKTOP_SAVE_S (30: its
 * hibernate_save_after; 0 skips the saved reading), BENCH_NET_PREFIX / BENCH_SLOT_CIDR (aeb,
 * 10.210.0.0/16); BENCH_SMOKE=1 makes the defaults tiny. Writes
 * bench/results/desktop-latest.{json,md}.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "@e2b/desktop";
import {
  cleanupDataDir,
  startServer,
  TEMPLATES_DIR,
  type TestServer,
  untilLogLine,
  useE2b,
} from "../test/helpers/server.js";
import {
  cgroupDir,
  checkPng,
  frozen,
  H,
  savedEntry,
  until,
  untilWarmImage,
  untilWindow,
  W,
  warmDirs,
} from "./desktop-host.js";
import { type BenchMeta, benchLog, envNum, finishMeta, hostMeta } from "./meta.js";
import { RESULTS } from "./paths.js";
import { memAvailableMiB, memAvailableSettledMiB, sandboxesPss } from "./procmem.js";
import { metaLines } from "./report.js";
import { untilOthersGone } from "./settle.js";
import { mean, percentile } from "./stats.js";

const SMOKE = process.env.BENCH_SMOKE === "1";
const CREATES = envNum("BENCH_DESKTOP_CREATES", SMOKE ? 1 : 6);
const SHOTS = envNum("BENCH_DESKTOP_SHOTS", SMOKE ? 2 : 20);
const FORKS = envNum("BENCH_DESKTOP_FORKS", SMOKE ? 1 : 4);
const MEM_K = envNum("BENCH_DESKTOP_MEM_K", SMOKE ? 1 : 2);
const SETTLE_S = envNum("BENCH_DESKTOP_SETTLE_S", SMOKE ? 1 : 8, true);
// The running reading must come before the freeze: settle plus the reading (~2 s) fit in it.
const HIBERNATE_S = Math.max(SETTLE_S + 4, envNum("BENCH_DESKTOP_HIBERNATE_S", SMOKE ? 5 : 20, true));
// envNum takes 0 for "unset": an explicit 0 must skip the saved reading, as documented.
const SAVE_S =
  process.env.BENCH_DESKTOP_SAVE_S === "0" ? 0 : envNum("BENCH_DESKTOP_SAVE_S", SMOKE ? 0 : HIBERNATE_S + 10, true);
const WARMUP = 1;
const PAGE_TITLE = "aenv bench page";

const log = benchLog("desktop");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Dist {
  n: number;
  samples: number[];
  p50: number;
  p90: number;
  min: number;
  max: number;
  mean: number;
}

function dist(samples: number[]): Dist {
  return {
    n: samples.length,
    samples: samples.map((s) => Math.round(s * 10) / 10),
    p50: percentile(samples, 50),
    p90: percentile(samples, 90),
    min: Math.min(...samples),
    max: Math.max(...samples),
    mean: mean(samples),
  };
}

interface MemReading {
  /** PSS of each desktop's runsc processes, MiB (systrap stubs sharing an mm counted once). */
  pssMiB: number[];
  pssMiBPerDesktop: number;
  processesPerDesktop: number;
  /** (MemAvailable before the K desktops − now) / K. */
  memAvailableDropMiBPerDesktop: number;
  memAvailableMiB: number;
}

interface Report {
  meta: BenchMeta;
  createToFirstScreenshot?: Dist & {
    createP50: number;
    /** The server's own part of each create (its "sandbox created" log entry): the restore. */
    serverCreateP50: number;
    firstScreenshotP50: number;
    restoredFromImage: number;
  };
  screenshot?: Dist & { pngKiB: number };
  fork?: {
    count: number;
    /** PSS of the parent with Firefox open, just before the fork. */
    parentPssMiB: number;
    /** Until fork() answered (every child started). */
    forkAnsweredMs: number;
    /** Until every child's screenshot() answered. */
    wallMs: number;
    /** From the fork call to each child's screenshot() answer. */
    perChild: Dist;
    failed: number;
    /** Children whose `wmctrl -l` lists the page's Firefox window (checked after the timing). */
    childrenShowingThePage: number;
  };
  memory?: {
    k: number;
    memAvailableBeforeMiB: number;
    memAvailableAfterMiB?: number;
    running?: MemReading;
    frozen?: MemReading & { frozenAfterIdleS: number };
    saved?: MemReading & { savedAfterIdleS: number; imageMiBPerDesktop: number; saveMsPerDesktop: number };
  };
  errors: string[];
}

// ---- everything that must be torn down, whatever happens -------------------------------------

let server: TestServer | undefined;
const live = new Set<Sandbox>();

async function kill(...list: Sandbox[]): Promise<void> {
  await Promise.all(list.map((s) => s.kill().catch(() => false)));
  for (const s of list) live.delete(s);
}

async function newDesktop(opts: { timeoutMs: number }): Promise<Sandbox> {
  const s = await Sandbox.create(opts);
  live.add(s);
  return s;
}

async function stop(): Promise<void> {
  await kill(...live);
  if (server) {
    const s = server;
    server = undefined;
    await s.stop();
    cleanupDataDir(s);
  }
}

// ---- the measurements -------------------------------------------------------------------------

async function createToFirstScreenshot(s: TestServer, r: Report): Promise<void> {
  const total: number[] = [];
  const create: number[] = [];
  const shot: number[] = [];
  const serverMs: number[] = [];
  let restored = 0;
  for (let i = 0; i < WARMUP + CREATES; i++) {
    // The last one's runsc delete must not run beside this create.
    await untilOthersGone(s);
    const t0 = performance.now();
    const d = await newDesktop({ timeoutMs: 300_000 });
    try {
      const t1 = performance.now();
      checkPng(await d.screenshot());
      const t2 = performance.now();
      const how = await untilLogLine(s, ['"sandbox created"', d.sandboxId], 5000).catch(() => "");
      if (i < WARMUP) continue;
      if (how.includes('"from":"image"')) restored++;
      const ms = /"ms":(\d+)/.exec(how)?.[1];
      if (ms !== undefined) serverMs.push(Number(ms));
      total.push(t2 - t0);
      create.push(t1 - t0);
      shot.push(t2 - t1);
    } finally {
      await kill(d);
    }
  }
  if (restored < CREATES)
    r.errors.push(`create: ${CREATES - restored} of ${CREATES} were not restores of the warm image`);
  r.createToFirstScreenshot = {
    ...dist(total),
    createP50: percentile(create, 50),
    serverCreateP50: percentile(serverMs, 50),
    firstScreenshotP50: percentile(shot, 50),
    restoredFromImage: restored,
  };
  log(`create → first screenshot p50 ${percentile(total, 50).toFixed(0)} ms`);
}

async function screenshots(d: Sandbox, r: Report): Promise<void> {
  for (let i = 0; i < 2; i++) checkPng(await d.screenshot());
  const ms: number[] = [];
  let bytes = 0;
  for (let i = 0; i < SHOTS; i++) {
    const t = performance.now();
    const png = await d.screenshot();
    ms.push(performance.now() - t);
    checkPng(png);
    bytes += png.byteLength;
  }
  r.screenshot = { ...dist(ms), pngKiB: bytes / SHOTS / 1024 };
  log(`screenshot p50 ${percentile(ms, 50).toFixed(1)} ms`);
}

async function forkWithFirefox(s: TestServer, parent: Sandbox, r: Report): Promise<void> {
  await parent.files.write(
    "/home/user/site/index.html",
    `<title>${PAGE_TITLE}</title><h1>A page served inside the sandbox</h1><p>Forked with Firefox open.</p>`,
  );
  await parent.commands.run("cd /home/user/site && python3 -m http.server 8000 >/tmp/http.log 2>&1", {
    background: true,
    timeoutMs: 0,
  });
  await parent.commands.run(
    "for i in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.1; done; exit 1",
  );
  await parent.open("http://127.0.0.1:8000/");
  await untilWindow(parent, new RegExp(PAGE_TITLE), 120_000);
  // Let Firefox paint and settle: its start-up work would otherwise be forked along.
  await sleep(5000);
  const parentPssMiB = (sandboxesPss([parent.sandboxId])[0]?.pssKiB ?? 0) / 1024;
  await untilOthersGone(s, [parent.sandboxId]);
  const t0 = performance.now();
  const res = (await parent.fork({ count: FORKS })) as Array<Sandbox | Error>;
  const forkAnsweredMs = performance.now() - t0;
  const kids = res.filter((k): k is Sandbox => !(k instanceof Error));
  for (const k of kids) live.add(k);
  try {
    const perChild = await Promise.all(
      kids.map(async (k) => {
        checkPng(await k.screenshot());
        return performance.now() - t0;
      }),
    );
    const wallMs = performance.now() - t0;
    let showing = 0;
    for (const k of kids) if (new RegExp(PAGE_TITLE).test((await k.commands.run("wmctrl -l")).stdout)) showing++;
    const failed = res.length - kids.length;
    if (failed) r.errors.push(`fork: ${failed} of ${FORKS} children failed: ${res.find((k) => k instanceof Error)}`);
    if (showing < kids.length) r.errors.push(`fork: ${kids.length - showing} children do not show the page's window`);
    r.fork = {
      count: FORKS,
      parentPssMiB,
      forkAnsweredMs,
      wallMs,
      perChild: dist(perChild),
      failed,
      childrenShowingThePage: showing,
    };
    log(`fork ×${FORKS}: every child's screenshot after ${wallMs.toFixed(0)} ms`);
  } finally {
    await kill(...kids);
  }
}

async function reading(ids: string[], before: number): Promise<MemReading> {
  const pss = sandboxesPss(ids);
  const avail = await memAvailableMiB();
  const pssMiB = pss.map((p) => Math.round((p.pssKiB / 1024) * 10) / 10);
  return {
    pssMiB,
    pssMiBPerDesktop: mean(pssMiB),
    processesPerDesktop: mean(pss.map((p) => p.pids.length)),
    memAvailableDropMiBPerDesktop: (before - avail) / ids.length,
    memAvailableMiB: avail,
  };
}

async function idleMemory(s: TestServer, r: Report): Promise<void> {
  await untilOthersGone(s);
  const before = await memAvailableSettledMiB();
  const mem: NonNullable<Report["memory"]> = { k: MEM_K, memAvailableBeforeMiB: before };
  r.memory = mem;
  const desks: Sandbox[] = [];
  try {
    for (let i = 0; i < MEM_K; i++) desks.push(await newDesktop({ timeoutMs: 900_000 }));
    // Each used once more now: their idle time starts together.
    for (const d of desks) checkPng(await d.screenshot());
    const lastUse = Date.now();
    const ids = desks.map((d) => d.sandboxId);
    await sleep(SETTLE_S * 1000);
    if (ids.some(frozen)) throw new Error(`frozen before the running reading: raise BENCH_DESKTOP_HIBERNATE_S`);
    mem.running = await reading(ids, before);
    if (ids.some(frozen)) r.errors.push("memory: a desktop froze during the running reading");
    log(`idle desktop, running: PSS ${mem.running.pssMiBPerDesktop.toFixed(1)} MiB`);

    await until("every idle desktop frozen", () => ids.every(frozen), (HIBERNATE_S + 60) * 1000);
    const frozenAfterIdleS = (Date.now() - lastUse) / 1000;
    await sleep(2000);
    mem.frozen = { ...(await reading(ids, before)), frozenAfterIdleS };
    log(`idle desktop, frozen: PSS ${mem.frozen.pssMiBPerDesktop.toFixed(1)} MiB`);

    if (SAVE_S) {
      await until(
        "every idle desktop saved to disk",
        () => ids.every((id) => savedEntry(s, id) && !cgroupDir(id)),
        (SAVE_S + 60 + 20 * MEM_K) * 1000,
      );
      const savedAfterIdleS = (Date.now() - lastUse) / 1000;
      await sleep(2000);
      const entries = ids.map((id) => savedEntry(s, id) as { ms: number; bytes: number });
      mem.saved = {
        ...(await reading(ids, before)),
        savedAfterIdleS,
        imageMiBPerDesktop: mean(entries.map((e) => e.bytes / 2 ** 20)),
        saveMsPerDesktop: mean(entries.map((e) => e.ms)),
      };
      log(`idle desktop, saved: ${mem.saved.imageMiBPerDesktop.toFixed(1)} MiB on disk`);
    }
  } finally {
    await kill(...desks);
  }
  await untilOthersGone(s);
  mem.memAvailableAfterMiB = await memAvailableSettledMiB();
}

// ---- the report -------------------------------------------------------------------------------

const fmt = (v: number | undefined, d = 0) => (v === undefined || Number.isNaN(v) ? "–" : v.toFixed(d));

function markdown(r: Report): string {
  const rows: [string, string, string][] = [];
  const c = r.createToFirstScreenshot;
  if (c) {
    rows.push([`create → first screenshot(), p50 (n=${c.n}, ${c.restoredFromImage} restores)`, fmt(c.p50), "ms"]);
    rows.push(["create → first screenshot(), p90", fmt(c.p90), "ms"]);
    rows.push(["  of which Sandbox.create() (API create + the SDK's start checks), p50", fmt(c.createP50), "ms"]);
    rows.push(["    of which the server's create (the restore), p50", fmt(c.serverCreateP50), "ms"]);
    rows.push(["  of which the first screenshot(), p50", fmt(c.firstScreenshotP50), "ms"]);
  }
  const s = r.screenshot;
  if (s) {
    rows.push([`screenshot() on one desktop, p50 (n=${s.n})`, fmt(s.p50, 1), "ms"]);
    rows.push(["screenshot(), p90", fmt(s.p90, 1), "ms"]);
    rows.push([`screenshot() PNG (${W}x${H}), mean`, fmt(s.pngKiB), "KiB"]);
  }
  const f = r.fork;
  if (f) {
    rows.push([`fork ×${f.count} with Firefox open: until every child's screenshot()`, fmt(f.wallMs), "ms"]);
    rows.push(["  per child, fork call → its screenshot(), p50", fmt(f.perChild.p50), "ms"]);
    rows.push(["  fork() answered", fmt(f.forkAnsweredMs), "ms"]);
    rows.push(["  children showing the page's window", `${f.childrenShowingThePage}/${f.count}`, ""]);
    rows.push(["  parent with Firefox open, PSS", fmt(f.parentPssMiB, 1), "MiB"]);
  }
  const m = r.memory;
  const states = [
    ["running", m?.running],
    [`frozen (hibernated after ${HIBERNATE_S} s idle)`, m?.frozen],
    [`saved to disk (after ${SAVE_S} s idle)`, m?.saved],
  ] as const;
  for (const [label, x] of states) {
    if (!x) continue;
    rows.push([`idle desktop, ${label}: PSS per desktop (K=${m?.k})`, fmt(x.pssMiBPerDesktop, 1), "MiB"]);
    rows.push([
      `idle desktop, ${label}: MemAvailable drop per desktop`,
      fmt(x.memAvailableDropMiBPerDesktop, 1),
      "MiB",
    ]);
  }
  if (m?.saved) {
    rows.push(["idle desktop, saved: image on disk per desktop", fmt(m.saved.imageMiBPerDesktop, 1), "MiB"]);
    rows.push(["idle desktop, saved: the save, per desktop", fmt(m.saved.saveMsPerDesktop), "ms"]);
  }
  const lines = [
    "# aenv computer-use benchmark (@e2b/desktop)",
    "",
    ...metaLines(r.meta).map((l) => `- ${l}`),
    `- commit: ${r.meta.commit}`,
    "",
    "| metric | value | unit |",
    "|:--|--:|:--|",
    ...rows.map(([a, b, u]) => `| ${a} | ${b} | ${u} |`),
    "",
  ];
  if (r.errors.length) lines.push("Errors:", "", ...r.errors.map((e) => `- ${e}`), "");
  return lines.join("\n");
}

// ---- main -------------------------------------------------------------------------------------

async function step(r: Report, name: string, fn: () => Promise<void>): Promise<void> {
  log(name);
  try {
    await fn();
  } catch (err) {
    r.errors.push(`${name}: ${(err as Error).message}`);
    // Where it failed and what the server said around it, for whoever reads the run's output.
    log(`FAILED ${name}: ${(err as Error).stack}`);
    if (server) process.stderr.write(`server log tail:\n${server.logs().split("\n").slice(-30).join("\n")}\n`);
  }
}

async function main(): Promise<number> {
  const started = Date.now();
  const report: Report = {
    meta: hostMeta({
      smoke: SMOKE ? "yes" : "no",
      creates: CREATES,
      warmup: WARMUP,
      shots: SHOTS,
      forks: FORKS,
      memK: MEM_K,
      settleS: SETTLE_S,
      hibernateAfterS: HIBERNATE_S,
      saveAfterS: SAVE_S,
      warmPool: "off",
    }),
    errors: [],
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const)
    process.once(sig, () => void stop().finally(() => process.exit(130)));
  try {
    if (!existsSync(join(TEMPLATES_DIR, "desktop", "template.json")))
      throw new Error(
        `no desktop template in ${TEMPLATES_DIR}: run scripts/build-desktop-template.sh ${TEMPLATES_DIR}`,
      );
    const warmBefore = warmDirs();
    const s = await startServer({
      env: {
        AENV_NET_PREFIX: process.env.BENCH_NET_PREFIX ?? "aeb",
        AENV_SLOT_CIDR: process.env.BENCH_SLOT_CIDR ?? "10.210.0.0/16",
        // Info: the warm image, each create's path and each idle save are read from the log.
        AENV_LOG_LEVEL: "info",
        // Every create a restore of the warm image; a pool's refills would share the cores.
        AENV_WARM_POOL_MAX: "0",
        AENV_HIBERNATE_AFTER: String(HIBERNATE_S),
        AENV_HIBERNATE_SAVE_AFTER: String(SAVE_S),
      },
    });
    server = s;
    useE2b(s);
    const details = (await s.api("GET", "/health/details")).body as { runtime?: { platform?: string } };
    report.meta.platform = details.runtime?.platform ?? "unknown";
    log("waiting for the desktop's warm image");
    await untilWarmImage(s, warmBefore);

    // Memory first: what the other steps leave behind is freed by the server for a while after.
    await step(report, "idle memory", () => idleMemory(s, report));
    await step(report, "create → first screenshot", () => createToFirstScreenshot(s, report));
    await step(report, "screenshot round trips, then fork with Firefox open", async () => {
      await untilOthersGone(s);
      const d = await newDesktop({ timeoutMs: 900_000 });
      try {
        await screenshots(d, report);
        await forkWithFirefox(s, d, report);
      } finally {
        await kill(d);
      }
    });
  } catch (err) {
    report.errors.push((err as Error).message);
  } finally {
    await stop();
  }
  finishMeta(report.meta, started);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "desktop-latest.json"), `${JSON.stringify(report, null, 2)}\n`);
  const md = markdown(report);
  writeFileSync(join(RESULTS, "desktop-latest.md"), md);
  console.log(md);
  return report.errors.length ? 1 : 0;
}

process.exit(await main());
