/**
 * Incremental snapshots of a real sandbox: a 500 MB sandbox (500 MB of files, or 500 MB held
 * in a process's memory) is snapshotted, 1 MB of it changes, and it is snapshotted again.
 * Reports what each commit uploaded to the repository against the image size, and the time.
 *
 *   node --import tsx bench/snapshots.ts        (part of `npm run bench`)
 *
 * Env: BENCH_SNAPSHOT_MB (default 500).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, untilCommitted, useE2b } from "../test/helpers/server.js";
import { RESULTS } from "./paths.js";

const MB = Number(process.env.BENCH_SNAPSHOT_MB ?? 500);

interface SnapInfo {
  snapshotID: string;
  sizeBytes: number;
  uploadedBytes: number;
}

interface Row {
  case: string;
  snapshot: string;
  imageMB: number;
  uploadedMB: number;
  /** Until the API answered (the image durable on the node). */
  ms: number;
  /** Until the repository commit finished. */
  commitMs: number;
}

const holdMemory = (mb: number) =>
  `python3 -c "import os,signal,time
b=bytearray(${mb}<<20)
for i in range(${mb}): b[i<<20:(i+1)<<20]=os.urandom(1<<20)
signal.signal(signal.SIGUSR1, lambda *a: b.__setitem__(slice(${mb >> 1}<<20,(${mb >> 1}+1)<<20), os.urandom(1<<20)))
open('/tmp/ready','w').write(str(os.getpid()))
time.sleep(1e9)"`;

async function main(): Promise<void> {
  const server = await startServer({ env: { AENV_NET_PREFIX: "aeb", AENV_SLOT_CIDR: "10.203.0.0/16" } });
  useE2b(server);
  const rows: Row[] = [];
  const snap = async (label: string, which: string, s: Sandbox) => {
    const t0 = performance.now();
    const r = await server.api("POST", `/sandboxes/${s.sandboxId}/snapshots`, {});
    const ms = performance.now() - t0;
    const taken = r.body as SnapInfo;
    // The repository commit runs after the API answers.
    const committed = await untilCommitted(server, taken.snapshotID);
    const commitMs = performance.now() - t0;
    rows.push({
      case: label,
      snapshot: which,
      imageMB: taken.sizeBytes / 1e6,
      uploadedMB: committed.uploadedBytes / 1e6,
      ms,
      commitMs,
    });
  };
  try {
    const files = await Sandbox.create({ timeoutMs: 600_000 });
    await files.commands.run(`head -c ${MB}M /dev/urandom > /home/user/data.bin`, { timeoutMs: 300_000 });
    await snap(`${MB} MB of files`, "first", files);
    await files.commands.run(
      `dd if=/dev/urandom of=/home/user/data.bin bs=1M count=1 seek=${MB >> 1} conv=notrunc status=none`,
    );
    await snap(`${MB} MB of files`, "after 1 MB changed", files);
    await files.kill();

    const mem = await Sandbox.create({ timeoutMs: 600_000 });
    await mem.commands.run(holdMemory(MB), { background: true, timeoutMs: 0 });
    await mem.commands.run("while [ ! -e /tmp/ready ]; do sleep 0.2; done", { timeoutMs: 300_000 });
    await snap(`${MB} MB of process memory`, "first", mem);
    await mem.commands.run("kill -USR1 $(cat /tmp/ready); sleep 0.5");
    await snap(`${MB} MB of process memory`, "after 1 MB changed", mem);
    await mem.kill();
  } finally {
    await server.stop();
    cleanupDataDir(server);
  }
  const meta = { date: new Date().toISOString(), cpus: cpus().length, loadAvg: loadavg(), mb: MB };
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "snapshots.json"), JSON.stringify({ meta, rows }, null, 2));
  console.log("\n| sandbox | snapshot | image MB | uploaded MB | API answer ms | committed ms |");
  console.log("|---|---|---:|---:|---:|---:|");
  for (const r of rows) {
    const cells = [
      r.case,
      r.snapshot,
      r.imageMB.toFixed(1),
      r.uploadedMB.toFixed(1),
      r.ms.toFixed(0),
      r.commitMs.toFixed(0),
    ];
    console.log(`| ${cells.join(" | ")} |`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
