/**
 * Snapshot repository benchmark: commit and materialize throughput for both backends
 * (posix_fs folder, s3 = s3rver on loopback) with a cold and a warm node cache, and the bytes a
 * second commit uploads after 1 MB of changes in a large folder.
 *
 *   node --import tsx bench/repository.ts
 *
 * Env: BENCH_REPO_MB (default 200), BENCH_INC_MB (default 500). The data is half random
 * (incompressible, like dirty memory pages) and half repetitive text (like zero/sparse pages and
 * file contents), in 1 MiB runs. Writes bench/results/repository.json and prints a table.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import type { RepositoryBackend } from "../packages/server/src/storage/repository/backend.js";
import { ChunkCache } from "../packages/server/src/storage/repository/chunk-cache.js";
import { ChunkRepository } from "../packages/server/src/storage/repository/chunk-repository.js";
import { PosixFsBackend } from "../packages/server/src/storage/repository/posix-fs-backend.js";
import { S3Backend } from "../packages/server/src/storage/repository/s3-backend.js";
import { RepositoryKey } from "../packages/server/src/storage/repository/signing.js";
import { startS3 } from "../packages/server/test/helpers/s3.js";
import { RESULTS } from "./paths.js";

const MB = 1e6;
const MiB = 1024 * 1024;
const testKey = new RepositoryKey("bench repository key 0123456789abcdef");
const SIZE_MB = Number(process.env.BENCH_REPO_MB ?? 200);
const INC_MB = Number(process.env.BENCH_INC_MB ?? 500);

interface Row {
  backend: string;
  case: string;
  value: number;
  unit: string;
}
const rows: Row[] = [];
const add = (backend: string, c: string, value: number, unit: string) => rows.push({ backend, case: c, value, unit });

const work = mkdtempSync("/var/tmp/aenv-bench-repo-");
const TEXT = Buffer.from("aenv checkpoint page 0123456789 ".repeat(32768)).subarray(0, MiB);

function makeData(mib: number): Buffer {
  const out = Buffer.allocUnsafe(mib * MiB);
  for (let i = 0; i < mib; i++) (i % 2 ? TEXT : randomBytes(MiB)).copy(out, i * MiB);
  return out;
}

function folder(name: string, data: Buffer): string {
  const dir = join(work, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  // A checkpoint folder: one big pages file and a few small ones.
  writeFileSync(join(dir, "pages.img"), data);
  writeFileSync(join(dir, "checkpoint.img"), randomBytes(64 * 1024));
  writeFileSync(join(dir, "pages_meta.img"), TEXT.subarray(0, 200 * 1024));
  return dir;
}

async function time<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t = performance.now();
  const r = await fn();
  return [(performance.now() - t) / 1000, r];
}

const cache = (name: string) => new ChunkCache({ dir: join(work, `cache-${name}`), maxBytes: 10 * 1024 * MiB });

async function benchBackend(name: string, make: () => RepositoryBackend): Promise<void> {
  const data = makeData(Math.round((SIZE_MB * MB) / MiB));
  const src = folder(`src-${name}`, data);
  const bytes = data.length;
  const mbps = (s: number) => bytes / MB / s;

  const writer = new ChunkRepository(make(), testKey, { cache: cache(`${name}-w`), cacheOnCommit: false });
  const [tc, c] = await time(() => writer.commit("bench-a", src, {}));
  add(name, `commit ${SIZE_MB} MB (new chunks)`, mbps(tc), "MB/s");
  add(name, "  uploaded (compressed) / total", c.stats.uploadedBytes / c.stats.bytes, "ratio");
  const [tr] = await time(() => writer.commit("bench-a2", src, {}));
  add(name, `commit ${SIZE_MB} MB again (all chunks present)`, mbps(tr), "MB/s");

  const reader = new ChunkRepository(make(), testKey, { cache: cache(`${name}-r`) });
  const [cold] = await time(() => reader.materialize("bench-a", join(work, `out-${name}-cold`)));
  add(name, "materialize, cold cache", mbps(cold), "MB/s");
  const fetched = reader.metrics().bytesFetched;
  const [warm] = await time(() => reader.materialize("bench-a", join(work, `out-${name}-warm`)));
  add(name, "materialize, warm cache", mbps(warm), "MB/s");
  add(name, "  backend bytes fetched, cold / warm", fetched / MB, "MB");
  add(name, "  backend bytes fetched by warm run", (reader.metrics().bytesFetched - fetched) / MB, "MB");
  rmSync(join(work, `out-${name}-cold`), { recursive: true, force: true });
  rmSync(join(work, `out-${name}-warm`), { recursive: true, force: true });
  rmSync(src, { recursive: true, force: true });

  // Incremental: a large folder, then 1 MB changed in the middle.
  const big = makeData(Math.round((INC_MB * MB) / MiB));
  const incSrc = folder(`inc-${name}`, big);
  const inc = new ChunkRepository(make(), testKey, { cacheOnCommit: false });
  const [t1, first] = await time(() => inc.commit("bench-inc-1", incSrc, {}));
  add(name, `commit ${INC_MB} MB, first`, first.stats.uploadedBytes / MB, "MB uploaded");
  add(name, `  commit ${INC_MB} MB, first`, t1, "s");
  randomBytes(MB).copy(big, Math.floor(big.length / 2));
  writeFileSync(join(incSrc, "pages.img"), big);
  const [t2, second] = await time(() => inc.commit("bench-inc-2", incSrc, {}));
  add(name, `commit ${INC_MB} MB after 1 MB changed`, second.stats.uploadedBytes / MB, "MB uploaded");
  add(name, `  of which chunks uploaded / total`, second.stats.uploadedChunks, `of ${second.stats.chunks}`);
  add(name, `  commit ${INC_MB} MB after 1 MB changed`, t2, "s");
  rmSync(incSrc, { recursive: true, force: true });
}

async function main(): Promise<void> {
  const started = Date.now();
  const s3 = await startS3("aenv-bench");
  const errors: string[] = [];
  try {
    let n = 0;
    await benchBackend("posix_fs", () => new PosixFsBackend(join(work, "repo")));
    await benchBackend("s3", () => new S3Backend(s3.backendOptions(`bench${n++ > 99 ? n : ""}`)));
  } catch (err) {
    errors.push(String(err));
    console.error(err);
  } finally {
    await s3.close();
    rmSync(work, { recursive: true, force: true });
  }
  const result = {
    meta: {
      date: new Date().toISOString(),
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? "",
      memTotalMiB: Math.round(totalmem() / MiB),
      settings: { sizeMB: SIZE_MB, incrementalMB: INC_MB, chunkMiB: 4, zstdLevel: 3, s3: "s3rver on loopback" },
      durationS: Math.round((Date.now() - started) / 1000),
    },
    rows,
    errors,
  };
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "repository.json"), `${JSON.stringify(result, null, 2)}\n`);
  const w = Math.max(...rows.map((r) => r.case.length));
  console.log(`\n| backend  | ${"case".padEnd(w)} | value      | unit |`);
  console.log(`|----------|-${"-".repeat(w)}-|------------|------|`);
  for (const r of rows) {
    const v = r.value >= 100 ? r.value.toFixed(0) : r.value.toFixed(2);
    console.log(`| ${r.backend.padEnd(8)} | ${r.case.padEnd(w)} | ${v.padStart(10)} | ${r.unit} |`);
  }
  if (errors.length) process.exitCode = 1;
}

await main();
