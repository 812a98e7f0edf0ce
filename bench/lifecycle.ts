/**
 * Lifecycle benchmark: pause, resume (to first command), snapshot while running, fork ×N
 * (to every child answering), image size, and how they grow with dirty memory and written
 * files — each beside raw `runsc checkpoint`/`restore` measured in the same run. Then the
 * same sandbox paused filesystem-only (`keepMemory: false`): pause, resume (a fresh boot plus
 * the layer) and bytes kept, beside raw runsc's memory checkpoint of the same case.
 *
 *   node --import tsx bench/lifecycle.ts        (part of `npm run bench`)
 *
 * Env: BENCH_DIRTY_MB (default "10,100,500"), BENCH_FORKS (default "1,4,16"), BENCH_REPS (3),
 * BENCH_FILES_MB (100; 4 with BENCH_SMOKE=1, which also shortens the warm-image wait),
 * BENCH_NET_PREFIX and BENCH_SLOT_CIDR (the server's network, default aeb / 10.204.0.0/16).
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { startServer, type TestServer, untilCommitted, useE2b } from "../test/helpers/server.js";
import { RESULTS, templateRootfs } from "./paths.js";
import { RawRunsc } from "./raw-runsc.js";
import { untilOthersGone } from "./settle.js";
import { mean } from "./stats.js";

const DIRTY = (process.env.BENCH_DIRTY_MB ?? "10,100,500").split(",").map(Number);
const FORKS = (process.env.BENCH_FORKS ?? "1,4,16").split(",").map(Number);
const REPS = Number(process.env.BENCH_REPS ?? 3);
// BENCH_SMOKE=1 (test/bench-smoke.test.ts): a small files case and a short wait for the warm image.
const SMOKE = process.env.BENCH_SMOKE === "1";
const FILES_MB = Number(process.env.BENCH_FILES_MB ?? (SMOKE ? 4 : 100));
const WARM_WAIT_MS = SMOKE ? 1000 : 8000;

interface Row {
  case: string;
  metric: string;
  aenv: number | null;
  raw: number | null;
  unit: string;
}

const rows: Row[] = [];
/** Rows of the filesystem-only pause; their raw column is raw runsc's memory checkpoint. */
const FS = "filesystem only:";
const errors: string[] = [];
const add = (c: string, metric: string, aenv: number | null, raw: number | null, unit: string) =>
  rows.push({ case: c, metric, aenv, raw, unit });

async function ms<T>(fn: () => Promise<T>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

function dirBytes(dir: string): number {
  let n = 0;
  for (const f of readdirSync(dir)) n += statSync(join(dir, f)).size;
  return n;
}

/** Holds `mb` MiB of random bytes in a process's memory; returns once they are written. */
const holdScript = (mb: number) =>
  `python3 -c "import os,time; b=[os.urandom(1<<20) for _ in range(${mb})]; open('/tmp/held','w').close(); time.sleep(1e9)"`;

async function aenvCase(server: TestServer, label: string, prepare: (s: Sandbox) => Promise<void>): Promise<void> {
  const s = await Sandbox.create({ timeoutMs: 600_000 });
  try {
    await prepare(s);
    let snapshotId = "";
    const first = await ms(async () => {
      snapshotId = (await s.createSnapshot()).snapshotId;
    });
    add(label, "snapshot while running", first, null, "ms");
    // Its commit to the repository (zstd, on the same cores) runs after the answer: the rows
    // below are measured once it is done, as on a node that is otherwise idle (raw has none).
    await untilCommitted(server, snapshotId).catch(() => {});
    // One sample is noisy here: the first and REPS-1 more, each once the last one is committed.
    const snaps = [first];
    for (let i = 1; i < REPS; i++) {
      let id = "";
      snaps.push(await ms(async () => void (id = (await s.createSnapshot()).snapshotId)));
      await untilCommitted(server, id).catch(() => {});
    }
    add(label, `snapshot while running (mean of ${REPS})`, mean(snaps), null, "ms");
    const pauses: number[] = [];
    const written: number[] = [];
    const resumes: number[] = [];
    const inMemory: number[] = [];
    const imageDir = join(server.dataDir, "sandboxes", s.sandboxId, "image");
    let image = 0;
    for (let i = 0; i < REPS; i++) {
      // The pause answers once the sandbox is stopped in place; its image is written behind
      // (the folder appears, renamed into place, once it is durable).
      const t = performance.now();
      await s.pause();
      pauses.push(performance.now() - t);
      while (!existsSync(imageDir)) {
        if (performance.now() - t > 120_000) throw new Error("pause image not written within 120 s");
        await new Promise((r) => setTimeout(r, 5));
      }
      written.push(performance.now() - t);
      image = dirBytes(imageDir);
      // Its runtime gone: the resume restores the image, as after any longer pause.
      await untilOthersGone(server);
      resumes.push(
        await ms(async () => {
          await s.connect();
          await s.commands.run("true");
        }),
      );
    }
    // A resume right after the pause: the sandbox is still in memory and goes on.
    for (let i = 0; i < REPS; i++) {
      await s.pause();
      inMemory.push(
        await ms(async () => {
          await s.connect();
          await s.commands.run("true");
        }),
      );
    }
    add(label, `pause, answered (mean of ${REPS})`, mean(pauses), null, "ms");
    add(label, `pause until its image is written (mean of ${REPS})`, mean(written), null, "ms");
    add(label, `resume → first command (mean of ${REPS})`, mean(resumes), null, "ms");
    add(label, `resume right after the pause → first command (mean of ${REPS})`, mean(inMemory), null, "ms");
    add(label, "pause image size", image / 2 ** 20, null, "MiB");
    // Filesystem-only, last: its resume is a new boot (the memory above is gone after it).
    const fsPauses: number[] = [];
    const fsResumes: number[] = [];
    let layer = 0;
    for (let i = 0; i < REPS; i++) {
      fsPauses.push(await ms(() => s.pause({ keepMemory: false } as never)));
      layer = dirBytes(join(server.dataDir, "sandboxes", s.sandboxId, "fs-layer"));
      fsResumes.push(
        await ms(async () => {
          await s.connect();
          await s.commands.run("true");
        }),
      );
    }
    add(label, `${FS} pause (mean of ${REPS})`, mean(fsPauses), null, "ms");
    add(label, `${FS} resume → first command (mean of ${REPS})`, mean(fsResumes), null, "ms");
    add(label, `${FS} layer size`, layer / 2 ** 20, null, "MiB");
  } finally {
    await s.kill().catch(() => {});
  }
}

async function rawCase(raw: RawRunsc, label: string, prepare: (id: string) => Promise<void>): Promise<void> {
  const id = raw.newId();
  await raw.start(id);
  try {
    await prepare(id);
    const img = join(raw.workDir, `img-${id}`);
    const lr: number[] = [];
    const rs: number[] = [];
    let size = 0;
    for (let i = 0; i < REPS; i++) {
      rmSync(img, { recursive: true, force: true });
      mkdirSync(img);
      lr.push(await ms(() => raw.checkpoint(id, img, true)));
      size = dirBytes(img);
      const child = raw.newId();
      rs.push(
        await ms(async () => {
          await raw.restore(child, img);
          await raw.exec(child, ["/bin/true"]);
        }),
      );
      await raw.delete(child);
    }
    const row = (metric: string, v: number) => {
      const r = rows.find((x) => x.case === label && x.metric === metric);
      if (r) r.raw = v;
      else add(label, metric, null, v, metric.includes("size") ? "MiB" : "ms");
    };
    // runsc pause, then runsc resume + the first exec: raw's way back to a sandbox still in memory.
    const rp: number[] = [];
    for (let i = 0; i < REPS; i++) {
      await raw.pause(id);
      rp.push(
        await ms(async () => {
          await raw.resume(id);
          await raw.exec(id, ["/bin/true"]);
        }),
      );
    }
    row("snapshot while running", lr[0] ?? 0);
    row(`snapshot while running (mean of ${REPS})`, mean(lr));
    // A raw pause is its checkpoint, the yardstick for both of ours.
    row(`pause, answered (mean of ${REPS})`, mean(lr));
    row(`pause until its image is written (mean of ${REPS})`, mean(lr));
    row(`resume → first command (mean of ${REPS})`, mean(rs));
    row(`resume right after the pause → first command (mean of ${REPS})`, mean(rp));
    row("pause image size", size / 2 ** 20);
    // There is no raw filesystem-only pause: the memory checkpoint it replaces is the yardstick.
    row(`${FS} pause (mean of ${REPS})`, mean(lr));
    row(`${FS} resume → first command (mean of ${REPS})`, mean(rs));
    row(`${FS} layer size`, size / 2 ** 20);
    rmSync(img, { recursive: true, force: true });
  } finally {
    await raw.delete(id);
  }
}

async function forkCase(server: TestServer, n: number, raw: RawRunsc): Promise<void> {
  const label = `fork ×${n} (10 MiB dirty)`;
  // The previous case's teardown (runsc delete, 1-2 s of CPU each) must not run beside this one.
  await untilOthersGone(server);
  const p = await Sandbox.create({ timeoutMs: 600_000 });
  const kids: Sandbox[] = [];
  try {
    await p.commands.run(holdScript(10), { background: true, timeoutMs: 0 });
    await p.commands.run("while [ ! -e /tmp/held ]; do sleep 0.1; done");
    const t = performance.now();
    const res = (await p.fork({ count: n } as never)) as unknown as Array<Sandbox | Error>;
    for (const r of res) if (!(r instanceof Error)) kids.push(r);
    await Promise.all(kids.map((k) => k.commands.run("true")));
    const aenvMs = performance.now() - t;
    const failed = res.length - kids.length;
    if (failed) errors.push(`${label}: ${failed} children failed`);
    add(label, "until every child answers", aenvMs, null, "ms");
  } finally {
    await Promise.all([p, ...kids].map((s) => s.kill().catch(() => {})));
  }
  const id = raw.newId();
  await raw.start(id);
  const img = join(raw.workDir, `fork-${id}`);
  const children: string[] = [];
  try {
    await raw.exec(id, ["sh", "-c", `nohup ${holdScript(10)} >/dev/null 2>&1 &`]);
    await raw.exec(id, ["sh", "-c", "while [ ! -e /tmp/held ]; do sleep 0.1; done"]);
    mkdirSync(img);
    const t = performance.now();
    await raw.checkpoint(id, img, true);
    await Promise.all(
      Array.from({ length: n }, async () => {
        const c = raw.newId();
        children.push(c);
        await raw.restore(c, img);
        await raw.exec(c, ["/bin/true"]);
      }),
    );
    const r = rows.find((x) => x.case === label);
    if (r) r.raw = performance.now() - t;
  } finally {
    for (const c of children) await raw.delete(c);
    await raw.delete(id);
    rmSync(img, { recursive: true, force: true });
  }
}

function fmt(v: number | null): string {
  // Small values (a filesystem layer of a few KiB) keep two significant digits.
  return v === null ? "–" : v >= 100 ? v.toFixed(0) : v >= 1 || v === 0 ? v.toFixed(1) : v.toPrecision(2);
}

function fmtRatio(x: number): string {
  return x >= 0.01 || x === 0 ? x.toFixed(2) : x.toPrecision(2);
}

function table(): string {
  const lines = ["| case | metric | aenv | raw runsc | aenv / raw | unit |", "|:--|:--|--:|--:|--:|:--|"];
  for (const r of rows) {
    const ratio = r.aenv !== null && r.raw ? `${fmtRatio(r.aenv / r.raw)}×` : "–";
    lines.push(`| ${r.case} | ${r.metric} | ${fmt(r.aenv)} | ${fmt(r.raw)} | ${ratio} | ${r.unit} |`);
  }
  return lines.join("\n");
}

async function main(): Promise<void> {
  const started = Date.now();
  const server = await startServer({
    // BENCH_NET_PREFIX / BENCH_SLOT_CIDR: run beside other servers on the host without sharing their network.
    env: {
      AENV_NET_PREFIX: process.env.BENCH_NET_PREFIX ?? "aeb",
      AENV_SLOT_CIDR: process.env.BENCH_SLOT_CIDR ?? "10.204.0.0/16",
      AENV_LOG_LEVEL: "warn",
      // The raw column has no pool; a pool's background restores would share the cores.
      AENV_WARM_POOL_MAX: "0",
    },
  });
  useE2b(server);
  const raw = new RawRunsc({ rootfs: templateRootfs(), overlay: "dir" });
  try {
    // Let the template's warm image finish so creates are restores.
    await new Promise((r) => setTimeout(r, WARM_WAIT_MS));
    for (const mb of DIRTY) {
      const label = `${mb} MiB dirty memory`;
      try {
        await aenvCase(server, label, async (s) => {
          await s.commands.run(holdScript(mb), { background: true, timeoutMs: 0 });
          await s.commands.run("while [ ! -e /tmp/held ]; do sleep 0.1; done", { timeoutMs: 120_000 });
        });
        await rawCase(raw, label, async (id) => {
          await raw.exec(id, ["sh", "-c", `nohup ${holdScript(mb)} >/dev/null 2>&1 &`]);
          await raw.exec(id, ["sh", "-c", "while [ ! -e /tmp/held ]; do sleep 0.1; done"], { timeoutMs: 120_000 });
        });
      } catch (err) {
        errors.push(`${label}: ${(err as Error).message}`);
        // What the server said around the failure, for whoever reads the run's output.
        process.stderr.write(
          `[lifecycle] ${label} failed; server log tail:\n${server.logs().split("\n").slice(-40).join("\n")}\n`,
        );
      }
    }
    const files = `${FILES_MB} MiB of files written`;
    const writeFiles = `for i in $(seq 1 ${FILES_MB}); do head -c 1048576 /dev/urandom > /tmp/f$i; done`;
    try {
      await aenvCase(server, files, async (s) => {
        await s.commands.run(writeFiles, { timeoutMs: 120_000 });
      });
      await rawCase(raw, files, async (id) => {
        await raw.exec(id, ["sh", "-c", writeFiles], { timeoutMs: 120_000 });
      });
    } catch (err) {
      errors.push(`${files}: ${(err as Error).message}`);
    }
    for (const n of FORKS) {
      try {
        await forkCase(server, n, raw);
      } catch (err) {
        errors.push(`fork ×${n}: ${(err as Error).message}`);
      }
    }
  } finally {
    await server.stop();
    rmSync(server.dataDir, { recursive: true, force: true });
    await raw.cleanup();
  }
  const meta = {
    date: new Date().toISOString(),
    runsc: execFileSync("runsc", ["--version"], { encoding: "utf8" }).split("\n")[0],
    node: process.version,
    seconds: Math.round((Date.now() - started) / 1000),
    reps: REPS,
  };
  const md = `# aenv lifecycle benchmark\n\n- date: ${meta.date}\n- ${meta.runsc}, systrap, ${meta.node}, 2 cores; took ${meta.seconds} s\n- aenv's pause answers once the sandbox is stopped in place (\`runsc pause\`) and writes its image \`sandbox.pause_image_delay_ms\` (500 ms by default) later: "answered" is the API call, "until its image is written" runs until the image folder is in place (durable), that delay included; the resume rows after it wait for the runtime to be gone (a restore from the image), "right after the pause" resumes at once (still in memory)
- raw: \`runsc checkpoint --leave-running --compression=none\` (the yardstick for both pause rows and the snapshot rows: the first checkpoint, and the mean of them all beside aenv's first snapshot and two more, each taken once the last is committed) and \`restore --detach\` + first \`exec /bin/true\`; "right after the pause": \`runsc pause\`, then \`runsc resume\` + \`exec /bin/true\`; \`--network=none\`, file-backed overlay, no server; fork raw = 1 checkpoint + N concurrent restores; "filesystem only" rows: aenv = \`pause({ keepMemory: false })\` and \`connect()\` (a fresh boot plus the kept layer) of the same sandbox, raw = raw runsc's memory checkpoint/restore of the same case\n\n${table()}\n${errors.length ? `\nErrors:\n\n${errors.map((e) => `- ${e}`).join("\n")}\n` : ""}`;
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "lifecycle-latest.json"), JSON.stringify({ meta, rows, errors }, null, 2));
  writeFileSync(join(RESULTS, "lifecycle-latest.md"), md);
  console.log(md);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
