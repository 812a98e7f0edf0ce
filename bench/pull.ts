/**
 * Image pull benchmark: a 3-layer ~100 MB image in a local registry, pulled by our ImageStore
 * (download + verify, then unpack to a rootfs) beside `skopeo copy docker://… dir:` in the
 * same run; cold (empty store) and warm (layers already stored).
 *
 *   node --import tsx bench/pull.ts
 *
 * Env: BENCH_REPS (default 3).
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { ImageStore } from "../packages/server/src/storage/images/index.js";
import { makeTar, OciLayout, push, startRegistry, type TarSpec } from "../packages/server/test/helpers/registry.js";
import { RESULTS } from "./paths.js";
import { mean } from "./stats.js";

const REPS = Number(process.env.BENCH_REPS ?? 3);
const MB = 1e6;

interface Row {
  case: string;
  aenv: number | null;
  skopeo: number | null;
  unit: string;
}

/** Text-like bytes: compressible (~4×) but not trivially so. */
function textish(n: number): Buffer {
  const words = ["sandbox", "layer", "gvisor", "registry", "digest", "manifest", "rootfs", "tar", "zstd", "gzip"];
  const parts: string[] = [];
  let len = 0;
  while (len < n) {
    const w = `${words[Math.floor(Math.random() * words.length)]}${Math.floor(Math.random() * 1000)} `;
    parts.push(w);
    len += w.length;
  }
  return Buffer.from(parts.join("")).subarray(0, n);
}

function buildImage(dir: string) {
  const layout = new OciLayout(dir);
  const big = (prefix: string, make: (n: number) => Buffer): TarSpec[] => [
    { name: `${prefix}/`, type: "dir" },
    ...Array.from({ length: 10 }, (_, i) => ({ name: `${prefix}/f${i}.bin`, content: make(4 * MB) })),
  ];
  const small: TarSpec[] = [{ name: "small/", type: "dir" }];
  for (let i = 0; i < 2000; i++) {
    small.push({ name: `small/${i}.dat`, content: i % 2 ? randomBytes(10_000) : textish(10_000) });
  }
  const d = layout.image({
    layers: [
      { tar: makeTar(big("random", randomBytes)), compression: "gzip" },
      { tar: makeTar(big("text", textish)), compression: "gzip" },
      { tar: makeTar(small), compression: "zstd" },
    ],
    config: { Cmd: ["/bin/sh"] },
  });
  layout.tag(d, "v1");
  return d;
}

async function ms<T>(fn: () => Promise<T> | T): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

async function main(): Promise<void> {
  const started = Date.now();
  const loadStart = loadavg();
  const work = mkdtempSync("/var/tmp/aenv-bench-pull-");
  const registry = await startRegistry();
  const rows: Row[] = [];
  try {
    process.stdout.write("building and pushing the image… ");
    const manifest = buildImage(join(work, "layout"));
    await push(join(work, "layout"), "v1", registry.host, "bench/img");
    const ref = `${registry.host}/bench/img:v1`;
    // The registry is on loopback: images.allow_private_registries.
    const probe = await new ImageStore({ dir: join(work, "probe"), allowPrivateRegistries: true }).pull(ref);
    const compressed = probe.layers.reduce((s, l) => s + l.size, 0);
    console.log(`${(compressed / MB).toFixed(1)} MB compressed, manifest ${manifest.digest.slice(0, 19)}`);

    const coldPull: number[] = [];
    const coldUnpack: number[] = [];
    const warmPull: number[] = [];
    const warmUnpack: number[] = [];
    const skopeoCold: number[] = [];
    const skopeoAgain: number[] = [];
    for (let i = 0; i < REPS; i++) {
      const storeDir = join(work, `store-${i}`);
      const store = new ImageStore({ dir: storeDir, allowPrivateRegistries: true });
      let img = probe;
      coldPull.push(await ms(async () => (img = await store.pull(ref))));
      coldUnpack.push(await ms(() => store.unpack(img, join(work, `root-cold-${i}`))));
      const warm = new ImageStore({ dir: storeDir, allowPrivateRegistries: true });
      warmPull.push(await ms(async () => (img = await warm.pull(ref))));
      if (img.transfer.blobsFetched !== 0) throw new Error("warm pull downloaded blobs");
      warmUnpack.push(await ms(() => warm.unpack(img, join(work, `root-warm-${i}`))));
      const copy = (dest: string) =>
        execFileSync("skopeo", [
          "--insecure-policy",
          "copy",
          "-q",
          "--src-tls-verify=false",
          `docker://${ref}`,
          `dir:${dest}`,
        ]);
      skopeoCold.push(await ms(() => copy(join(work, `skopeo-${i}`))));
      skopeoAgain.push(await ms(() => copy(join(work, `skopeo-again-${i}`))));
      for (const d of [`root-cold-${i}`, `root-warm-${i}`, `skopeo-${i}`, `skopeo-again-${i}`, `store-${i}`]) {
        rmSync(join(work, d), { recursive: true, force: true });
      }
    }
    rows.push({
      case: "cold: download + verify (aenv pull vs skopeo copy to dir:)",
      aenv: mean(coldPull),
      skopeo: mean(skopeoCold),
      unit: "ms",
    });
    rows.push({ case: "cold: unpack to rootfs (aenv only)", aenv: mean(coldUnpack), skopeo: null, unit: "ms" });
    rows.push({
      case: "cold: pull + unpack",
      aenv: mean(coldPull) + mean(coldUnpack),
      skopeo: mean(skopeoCold),
      unit: "ms",
    });
    rows.push({
      case: "warm: pull (layers stored) vs skopeo copy again",
      aenv: mean(warmPull),
      skopeo: mean(skopeoAgain),
      unit: "ms",
    });
    rows.push({
      case: "warm: pull + unpack",
      aenv: mean(warmPull) + mean(warmUnpack),
      skopeo: mean(skopeoAgain),
      unit: "ms",
    });
    rows.push({
      case: "cold download throughput",
      aenv: compressed / MB / (mean(coldPull) / 1000),
      skopeo: compressed / MB / (mean(skopeoCold) / 1000),
      unit: "MB/s",
    });
    const meta = {
      date: new Date().toISOString(),
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model ?? "",
      loadAvgStart: loadStart,
      loadAvgEnd: loadavg(),
      reps: REPS,
      compressedBytes: compressed,
      layers: probe.layers.map((l) => ({ mediaType: l.mediaType, size: l.size })),
      durationS: Math.round((Date.now() - started) / 1000),
    };
    const samples = { coldPull, coldUnpack, warmPull, warmUnpack, skopeoCold, skopeoAgain };
    mkdirSync(RESULTS, { recursive: true });
    writeFileSync(join(RESULTS, "pull.json"), `${JSON.stringify({ meta, rows, samples }, null, 2)}\n`);
    const f = (v: number | null) => (v === null ? "–" : v >= 100 ? v.toFixed(0) : v.toFixed(1));
    console.log(`\n| case (mean of ${REPS}) | aenv | skopeo | aenv / skopeo | unit |\n|:--|--:|--:|--:|:--|`);
    for (const r of rows) {
      const ratio = r.aenv !== null && r.skopeo ? `${(r.aenv / r.skopeo).toFixed(2)}×` : "–";
      console.log(`| ${r.case} | ${f(r.aenv)} | ${f(r.skopeo)} | ${ratio} | ${r.unit} |`);
    }
    console.log(`\n${join(RESULTS, "pull.json")}`);
  } finally {
    await registry.stop();
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
