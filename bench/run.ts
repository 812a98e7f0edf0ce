/**
 * aenv benchmark (`npm run bench`): the real e2b SDK against a real aenv-server, each figure
 * beside the same operation on raw `runsc` (see raw-runsc.ts). One process, one sandbox at a
 * time except for the idle-memory step. Results: stdout, bench/results/<timestamp>.json,
 * bench/results/latest.{json,md}.
 *
 * Env: BENCH_N (create→first command samples, default 20), BENCH_RT_N (50), BENCH_RAW_RT_N (20),
 * BENCH_FILE_MIB (32), BENCH_FILE_REPS (3), BENCH_MEM_K (5), BENCH_MEM_SETTLE_MS (3000),
 * BENCH_TIMEOUT_S (whole run, 345), BENCH_RAW_OVERLAY (memory | dir: raw runsc's rootfs overlay upper, default memory).
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { cpus, loadavg, release } from "node:os";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, TEMPLATES_DIR, type TestServer, useE2b } from "../test/helpers/server.js";
import { RESULTS, templateRootfs } from "./paths.js";
import { memAvailableKiB, sandboxesPss } from "./procmem.js";
import { transfersViaProxy } from "./proxy-files.js";
import { RawRunsc } from "./raw-runsc.js";
import { type IdleMemory, markdown, type Results, type Throughput, writeResults } from "./report.js";
import { mbps, mean, summarize, timeMs } from "./stats.js";

function envInt(name: string, def: number): number {
  const v = Number(process.env[name]);
  return Number.isFinite(v) && v > 0 ? Math.floor(v) : def;
}

const N = envInt("BENCH_N", 20);
const RT_N = envInt("BENCH_RT_N", 50);
const RAW_RT_N = envInt("BENCH_RAW_RT_N", 20);
const FILE_BYTES = envInt("BENCH_FILE_MIB", 32) * 2 ** 20;
const FILE_REPS = envInt("BENCH_FILE_REPS", 3);
const MEM_K = envInt("BENCH_MEM_K", 5);
const MEM_SETTLE_MS = envInt("BENCH_MEM_SETTLE_MS", 3000);
const RAW_OVERLAY = process.env.BENCH_RAW_OVERLAY === "dir" ? "dir" : "memory";
const TIMEOUT_S = envInt("BENCH_TIMEOUT_S", 345);
const WARMUP = 1;
const POOL_SIZE = 2;

// A collectable heap for the memory step: the bench's own garbage (32 MiB payloads) would
// otherwise move MemAvailable while it is being read.
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (msg: string) => process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

// ---- everything that must be torn down, whatever happens -------------------------------------

let server: TestServer | undefined;
let raw: RawRunsc | undefined;
const liveSandboxes = new Set<Sandbox>();
const deadline = Date.now() + TIMEOUT_S * 1000;
let aborted: string | undefined;

/** Throws once the run is past its deadline or interrupted, so loops stop between samples. */
function guard(): void {
  if (aborted) throw new Error(aborted);
  if (Date.now() > deadline) throw new Error(`bench exceeded BENCH_TIMEOUT_S=${TIMEOUT_S}`);
}

let cleaning: Promise<void> | undefined;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const s of [...liveSandboxes]) {
      await s.kill().catch(() => {});
      liveSandboxes.delete(s);
    }
    if (raw) await raw.cleanup().catch((e) => log(`raw cleanup: ${(e as Error).message}`));
    if (server) {
      const s = server;
      await Promise.race([s.stop(), sleep(30_000)]).catch(() => {});
      // Belt and braces: the server kills its sandboxes on SIGTERM; anything left goes here.
      try {
        const left = execFileSync("runsc", [`--root=${s.dataDir}/runsc`, "list", "-quiet"], { encoding: "utf8" })
          .split("\n")
          .filter(Boolean);
        for (const id of left)
          execFileSync("runsc", [`--root=${s.dataDir}/runsc`, "delete", "--force", id], { stdio: "ignore" });
        if (left.length) log(`deleted ${left.length} sandbox(es) the server left behind`);
      } catch {
        // no state dir: nothing left
      }
      cleanupDataDir(s);
    }
  })();
  return cleaning;
}

for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.once(sig, () => {
    aborted = `interrupted by ${sig}`;
    log(`${sig}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

// ---- the measurements -------------------------------------------------------------------------

async function aenvCreateToFirstCommand(
  beforeEach?: (i: number) => Promise<void>,
): Promise<NonNullable<Results["createToFirstCommand"]>["aenv"]> {
  const total: number[] = [];
  const create: number[] = [];
  const first: number[] = [];
  for (let i = 0; i < WARMUP + N; i++) {
    guard();
    await beforeEach?.(i);
    const t0 = performance.now();
    const sbx = await Sandbox.create();
    liveSandboxes.add(sbx);
    const t1 = performance.now();
    try {
      await sbx.commands.run("true");
      const t2 = performance.now();
      if (i >= WARMUP) {
        total.push(t2 - t0);
        create.push(t1 - t0);
        first.push(t2 - t1);
      }
    } finally {
      await sbx.kill();
      liveSandboxes.delete(sbx);
    }
  }
  return { ...summarize(total), createP50: summarize(create).p50, firstCommandP50: summarize(first).p50 };
}

async function rawCreateToFirstExec(r: RawRunsc): Promise<NonNullable<Results["createToFirstCommand"]>["raw"]> {
  const total: number[] = [];
  const run: number[] = [];
  const first: number[] = [];
  for (let i = 0; i < WARMUP + N; i++) {
    guard();
    const id = r.newId();
    const t0 = performance.now();
    try {
      await r.start(id);
      const t1 = performance.now();
      await r.exec(id, ["/bin/true"]);
      const t2 = performance.now();
      if (i >= WARMUP) {
        total.push(t2 - t0);
        run.push(t1 - t0);
        first.push(t2 - t1);
      }
    } finally {
      await r.delete(id);
    }
  }
  return { ...summarize(total), runP50: summarize(run).p50, firstExecP50: summarize(first).p50 };
}

function throughput(samples: number[]): Throughput {
  return { samples, mean: mean(samples), min: Math.min(...samples), max: Math.max(...samples) };
}

function payload(): Buffer {
  return randomBytes(FILE_BYTES);
}

/** Round trips and file throughput on one warm aenv sandbox. */
async function aenvWarm(res: Results): Promise<void> {
  const sbx = await Sandbox.create();
  liveSandboxes.add(sbx);
  try {
    for (let i = 0; i < 3; i++) await sbx.commands.run("true");
    const rt: number[] = [];
    for (let i = 0; i < RT_N; i++) {
      guard();
      rt.push((await timeMs(() => sbx.commands.run("true"))).ms);
    }
    res.commandRoundTrip = { ...res.commandRoundTrip, aenv: summarize(rt) };
    log(`aenv round trip p50 ${summarize(rt).p50.toFixed(1)} ms`);

    const w: number[] = [];
    const rd: number[] = [];
    for (let i = 0; i < FILE_REPS; i++) {
      guard();
      const buf = payload();
      const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength) as ArrayBuffer;
      const path = `/tmp/bench-${i}.bin`;
      w.push(mbps(FILE_BYTES, (await timeMs(() => sbx.files.write(path, ab))).ms));
      const { ms, value } = await timeMs(() => sbx.files.read(path, { format: "bytes" }));
      rd.push(mbps(FILE_BYTES, ms));
      if (!buf.equals(Buffer.from(value.buffer, value.byteOffset, value.byteLength))) {
        throw new Error(`aenv: read back ${value.byteLength} bytes that differ from the ${FILE_BYTES} written`);
      }
      await sbx.commands.run(`rm -f ${path}`);
    }
    res.fileWrite = { bytes: FILE_BYTES, ...res.fileWrite, aenv: throughput(w) };
    res.fileRead = { bytes: FILE_BYTES, ...res.fileRead, aenv: throughput(rd) };

    // The same transfers with node:http instead of the SDK's fetch: the server's path alone.
    const http = await transfersViaProxy(sbx, FILE_REPS, () => {
      guard();
      return payload();
    });
    res.fileWriteHttp = throughput(http.writeMBps);
    res.fileReadHttp = throughput(http.readMBps);
  } finally {
    await sbx.kill();
    liveSandboxes.delete(sbx);
  }
}

async function rawWarm(r: RawRunsc, res: Results): Promise<void> {
  const id = r.newId();
  try {
    await r.start(id);
    for (let i = 0; i < 3; i++) await r.exec(id, ["/bin/true"]);
    const rt: number[] = [];
    for (let i = 0; i < RAW_RT_N; i++) {
      guard();
      rt.push((await timeMs(() => r.exec(id, ["/bin/true"]))).ms);
    }
    res.commandRoundTrip = { ...res.commandRoundTrip, raw: summarize(rt) };
    log(`raw round trip p50 ${summarize(rt).p50.toFixed(1)} ms`);

    const w: number[] = [];
    const rd: number[] = [];
    for (let i = 0; i < FILE_REPS; i++) {
      guard();
      const buf = payload();
      const path = `/tmp/bench-${i}.bin`;
      w.push(mbps(FILE_BYTES, (await timeMs(() => r.exec(id, ["/bin/sh", "-c", `cat > ${path}`], { stdin: buf }))).ms));
      const { ms, value } = await timeMs(() => r.exec(id, ["/bin/cat", path]));
      rd.push(mbps(FILE_BYTES, ms));
      if (!buf.equals(value.stdout)) {
        throw new Error(`raw: read back ${value.stdout.byteLength} bytes that differ from the ${FILE_BYTES} written`);
      }
      await r.exec(id, ["/bin/rm", "-f", path]);
    }
    res.fileWrite = { bytes: FILE_BYTES, ...res.fileWrite, raw: throughput(w) };
    res.fileRead = { bytes: FILE_BYTES, ...res.fileRead, raw: throughput(rd) };
  } finally {
    await r.delete(id);
  }
}

/** MemAvailable in KiB, averaged over a few reads to smooth out background noise. */
async function memAvailableSmoothed(reads = 4, gapMs = 250): Promise<number> {
  gc();
  const v: number[] = [];
  for (let i = 0; i < reads; i++) {
    if (i) await sleep(gapMs);
    v.push(memAvailableKiB());
  }
  return mean(v);
}

/**
 * Starts K sandboxes, lets them idle, then reads each one's PSS and the system's MemAvailable.
 * The MemAvailable cost is the mean of the drop on start (before → up) and the rise on teardown
 * (up → after), divided by K, which cancels slow drift from other work on the machine.
 */
async function measureIdle(create: () => Promise<string>, destroyAll: () => Promise<void>): Promise<IdleMemory> {
  await sleep(1000);
  const before = await memAvailableSmoothed();
  const ids: string[] = [];
  let up: number;
  let pss: ReturnType<typeof sandboxesPss>;
  try {
    for (let i = 0; i < MEM_K; i++) {
      guard();
      ids.push(await create());
    }
    await sleep(MEM_SETTLE_MS);
    pss = sandboxesPss(ids);
    up = await memAvailableSmoothed();
  } finally {
    await destroyAll();
  }
  await sleep(1500);
  const after = await memAvailableSmoothed();
  for (const p of pss) if (p.pids.length === 0) throw new Error(`no runsc processes found for sandbox ${p.id}`);
  const pssMiB = pss.map((p) => p.pssKiB / 1024);
  const k = ids.length;
  const first = pss[0];
  return {
    k,
    pssMiB,
    pssMiBPerSandbox: mean(pssMiB),
    processesPerSandbox: mean(pss.map((p) => p.pids.length)),
    addressSpacesPerSandbox: mean(pss.map((p) => p.addressSpaces)),
    memAvailableDropMiBPerSandbox: (before - up + (after - up)) / 2 / 1024 / k,
    memAvailableMiB: { before: before / 1024, up: up / 1024, after: after / 1024 },
    firstSandboxProcesses: first?.procs ?? [],
  };
}

async function aenvIdleMemory(): Promise<IdleMemory> {
  const mine: Sandbox[] = [];
  return measureIdle(
    async () => {
      const sbx = await Sandbox.create();
      liveSandboxes.add(sbx);
      mine.push(sbx);
      return sbx.sandboxId;
    },
    async () => {
      for (const s of mine) {
        await s.kill().catch(() => {});
        liveSandboxes.delete(s);
      }
    },
  );
}

async function rawIdleMemory(r: RawRunsc): Promise<IdleMemory> {
  const ids: string[] = [];
  return measureIdle(
    async () => {
      const id = r.newId();
      ids.push(id);
      await r.start(id);
      return id;
    },
    async () => {
      for (const id of ids) await r.delete(id);
    },
  );
}

// ---- main -------------------------------------------------------------------------------------

function meminfoMiB(field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync("/proc/meminfo", "utf8"));
  return m ? Math.round(Number(m[1]) / 1024) : 0;
}

async function step(res: Results, name: string, fn: () => Promise<void>): Promise<void> {
  guard();
  log(name);
  try {
    await fn();
  } catch (e) {
    const msg = `${name}: ${(e as Error).message}`;
    res.errors.push(msg);
    log(`FAILED ${msg}`);
    if (aborted || Date.now() > deadline) throw e;
  }
}

async function main(res: Results): Promise<void> {
  log(`starting aenv-server (templates ${TEMPLATES_DIR})`);
  // Own netns prefix and slot range: test servers ("aet", 10.202/16) may run at the same time,
  // and a server clears every namespace with its prefix when it starts. No warm pool here:
  // these rows measure the restore path (and a pool's refills would share the cores); the
  // pool's own create row comes from a second server (poolCreateToFirstCommand).
  server = await startServer({
    env: {
      AENV_LOG_LEVEL: "warn",
      AENV_WARM_SLOTS: "4",
      AENV_NET_PREFIX: "aeb",
      AENV_SLOT_CIDR: "10.203.0.0/16",
      AENV_WARM_POOL_MAX: "0",
    },
  });
  useE2b(server);
  const details = (await server.api("GET", "/health/details")).body as {
    runtime?: { platform?: string; version?: string };
  };
  res.meta.aenvRuntime = details.runtime;
  res.meta.platform = details.runtime?.platform ?? "systrap";
  raw = new RawRunsc({ rootfs: templateRootfs(), platform: res.meta.platform, overlay: RAW_OVERLAY });
  const r = raw;

  res.createToFirstCommand = {};
  res.commandRoundTrip = {};
  res.idleMemory = {};
  // Memory first, while the machine and this process hold the least garbage.
  await step(res, `aenv: idle memory, K=${MEM_K}`, async () => {
    res.idleMemory = { ...res.idleMemory, aenv: await aenvIdleMemory() };
  });
  await step(res, `raw: idle memory, K=${MEM_K}`, async () => {
    res.idleMemory = { ...res.idleMemory, raw: await rawIdleMemory(r) };
  });
  await step(res, `aenv: create → first command ×${N}`, async () => {
    res.createToFirstCommand = { ...res.createToFirstCommand, aenv: await aenvCreateToFirstCommand() };
  });
  await step(res, `raw: run --detach → first exec ×${N}`, async () => {
    res.createToFirstCommand = { ...res.createToFirstCommand, raw: await rawCreateToFirstExec(r) };
  });
  await step(res, `aenv: round trip ×${RT_N}, files ${FILE_BYTES / 2 ** 20} MiB ×${FILE_REPS}`, () => aenvWarm(res));
  await step(res, `raw: exec round trip ×${RAW_RT_N}, files ${FILE_BYTES / 2 ** 20} MiB ×${FILE_REPS}`, () =>
    rawWarm(r, res),
  );
  await step(res, `aenv with a warm pool: create → first command ×${N}`, async () => {
    res.createToFirstCommand = { ...res.createToFirstCommand, pool: await poolCreateToFirstCommand() };
  });
}

/**
 * Creates through a second server whose warm pool keeps POOL_SIZE sandboxes restored and
 * frozen. Each create claims one; the next waits until the pool refilled (what a steady
 * create rate the pool was sized for sees), at most 10 s.
 */
async function poolCreateToFirstCommand(): Promise<NonNullable<Results["createToFirstCommand"]>["pool"]> {
  if (server) await server.stop();
  if (server) cleanupDataDir(server);
  server = await startServer({
    env: {
      AENV_LOG_LEVEL: "info",
      AENV_WARM_SLOTS: "4",
      AENV_NET_PREFIX: "aeb",
      AENV_SLOT_CIDR: "10.203.0.0/16",
      AENV_WARM_POOL_MIN: String(POOL_SIZE),
      AENV_WARM_POOL_MAX: String(POOL_SIZE),
    },
  });
  useE2b(server);
  const s = server;
  const ready = () => (s.logs().match(/warm pool sandbox ready/g) ?? []).length;
  // The first create starts the template's pool; it is the warm-up sample.
  return aenvCreateToFirstCommand(async (i) => {
    const want = i === 0 ? 0 : POOL_SIZE + i - 1;
    const until = Date.now() + 10_000;
    while (ready() < want && Date.now() < until) await sleep(50);
    // Let the refill's restore settle (it competes for the same cores).
    if (i > 0) await sleep(300);
  });
}

const started = Date.now();
const cpuList = cpus();
const results: Results = {
  meta: {
    date: new Date().toISOString(),
    runscVersion: (() => {
      try {
        return (
          execFileSync("runsc", ["--version"], { encoding: "utf8" })
            .split("\n")[0]
            ?.replace(/^runsc version /, "") ?? ""
        );
      } catch {
        return "unknown";
      }
    })(),
    platform: "unknown",
    node: process.version,
    cpus: cpuList.length,
    cpuModel: cpuList[0]?.model.trim() ?? "unknown",
    memTotalMiB: meminfoMiB("MemTotal"),
    kernel: release(),
    loadAvgStart: loadavg().map((x) => Math.round(x * 100) / 100),
    settings: {
      n: N,
      warmup: WARMUP,
      roundTripN: RT_N,
      rawRoundTripN: RAW_RT_N,
      fileBytes: FILE_BYTES,
      fileReps: FILE_REPS,
      memK: MEM_K,
      memSettleMs: MEM_SETTLE_MS,
      rawOverlay: RAW_OVERLAY === "dir" ? "root:dir (file-backed, like aenv)" : "root:memory",
      rawCgroups: "kept (1 GiB, 2 CPUs, 4096 pids)",
    },
  },
  errors: [],
};

let exitCode = 0;
let timer: NodeJS.Timeout | undefined;
try {
  await Promise.race([
    main(results),
    new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => {
          aborted = `bench exceeded BENCH_TIMEOUT_S=${TIMEOUT_S}`;
          reject(new Error(aborted));
        },
        TIMEOUT_S * 1000 + 5000,
      );
    }),
  ]);
} catch (e) {
  const msg = (e as Error).message;
  if (!results.errors.some((x) => x.endsWith(msg))) results.errors.push(msg);
  log(`aborted: ${msg}`);
  exitCode = 1;
} finally {
  clearTimeout(timer);
  log("cleaning up");
  await cleanup();
}
if (results.errors.length) exitCode = 1;
results.meta.durationS = (Date.now() - started) / 1000;
results.meta.loadAvgEnd = loadavg().map((x) => Math.round(x * 100) / 100);
const files = writeResults(RESULTS, results);
process.stdout.write(`\n${markdown(results)}\n`);
log(`wrote ${files.join(", ")}`);
process.exit(exitCode);
