/**
 * Images on demand. N generated images of BASE + OWN MB that share their base layer, in a
 * local registry (Debian's docker-registry) behind a proxy capped at MBPS (a registry across a
 * network); two runsc nodes of a cluster with cluster.p2p, Redis between them. Each image is
 * started on node a (no node holds it: pulled and unpacked through the content store), then
 * on node b (a holds it: started from a's tree, content fetched on first read), then again on
 * each once local. The same images as eStargz layers are then started on node a, read lazily by
 * range from the registry, and again once local. Beside them, in the same run: the same image pulled and unpacked whole into
 * an empty store without sharing (the path before images started on demand) and the disk each
 * node holds against the images' sizes.
 *
 *   node --import tsx bench/images.ts        (part of `npm run bench`)
 *
 * Env: BENCH_IMAGES_N (3), BENCH_IMAGES_BASE_MB (600), BENCH_IMAGES_OWN_MB (400),
 * BENCH_IMAGES_FILE_MB (8), BENCH_IMAGES_MBPS (100); BENCH_SMOKE=1 makes them tiny.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest, type Server } from "node:http";
import { join } from "node:path";
import { Transform } from "node:stream";
import { Sandbox } from "e2b";
import { ImageStore } from "../packages/server/src/storage/images/index.js";
import { freePort, type Registry, startRegistry } from "../packages/server/test/helpers/registry.js";
import { API_KEY, TestCluster, via } from "../test/helpers/cluster.js";
import { imageFamily, pushFamily } from "../test/helpers/image-family.js";
import { envNum, finishMeta, hostMeta } from "./meta.js";
import { RESULTS } from "./paths.js";
import { type Summary, summarize } from "./stats.js";

const SMOKE = process.env.BENCH_SMOKE === "1";
const N = envNum("BENCH_IMAGES_N", SMOKE ? 2 : 3);
const BASE_MB = envNum("BENCH_IMAGES_BASE_MB", SMOKE ? 8 : 600);
const OWN_MB = envNum("BENCH_IMAGES_OWN_MB", SMOKE ? 4 : 400);
const FILE_MB = envNum("BENCH_IMAGES_FILE_MB", SMOKE ? 2 : 8);
const MBPS = envNum("BENCH_IMAGES_MBPS", 100);
const MiB = 1024 * 1024;

/** Forwards to the registry, sending at most `mbps` MB/s in all (one token bucket). */
async function throttledProxy(upstream: string, mbps: number): Promise<{ host: string; server: Server }> {
  const port = await freePort();
  let next = Date.now();
  const pace = () =>
    new Transform({
      transform(chunk: Buffer, _e, done) {
        const now = Date.now();
        next = Math.max(next, now) + (chunk.length / (mbps * 1e6)) * 1000;
        setTimeout(() => done(null, chunk), Math.max(0, next - now));
      },
    });
  const [uh, up] = upstream.split(":");
  const server = createServer((req, res) => {
    const preq = httpRequest(
      { host: uh, port: Number(up), method: req.method, path: req.url, headers: { ...req.headers, host: upstream } },
      (pres) => {
        res.writeHead(pres.statusCode ?? 502, pres.headers);
        pres.pipe(pace()).pipe(res);
      },
    );
    preq.on("error", () => res.writeHead(502).end());
    req.pipe(preq);
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  return { host: `127.0.0.1:${port}`, server };
}

const du = (dir: string) =>
  Number(execFileSync("du", ["-sx", "--block-size=1", dir], { encoding: "utf8" }).split("\t")[0]);

/** Create → first command (`cat /id.txt`) through the e2b SDK, checked. */
async function start(url: string, image: string, n: number): Promise<{ ms: number; id: string }> {
  const t0 = performance.now();
  const sbx = await Sandbox.create(image, { ...via(url), timeoutMs: 600_000, requestTimeoutMs: 600_000 });
  const out = (await sbx.commands.run("cat /id.txt")).stdout;
  const ms = performance.now() - t0;
  if (out !== `image ${n}\n`) throw new Error(`image ${n} said ${JSON.stringify(out)}`);
  return { ms, id: sbx.sandboxId };
}

async function kill(url: string, id: string): Promise<void> {
  await fetch(`${url}/sandboxes/${id}`, { method: "DELETE", headers: { "x-api-key": API_KEY } });
}

async function main(): Promise<void> {
  const started = Date.now();
  const meta = hostMeta({ n: N, baseMB: BASE_MB, ownMB: OWN_MB, fileMB: FILE_MB, mbps: MBPS });
  const work = mkdtempSync("/var/tmp/aenv-bench-images-");
  let registry: Registry | undefined;
  let proxy: Server | undefined;
  const cluster = new TestCluster("aeg");
  const errors: string[] = [];
  const out: Record<string, unknown> = {};
  try {
    process.stdout.write(`generating ${N} images of ${BASE_MB} + ${OWN_MB} MB… `);
    const fam = imageFamily(join(work, "fam"), {
      count: N,
      baseFiles: Math.max(1, Math.round(BASE_MB / FILE_MB)),
      baseFileBytes: FILE_MB * MiB,
      ownFiles: Math.max(1, Math.round(OWN_MB / FILE_MB)),
      ownFileBytes: FILE_MB * MiB,
    });
    // The same images as eStargz layers (each file its own gzip members, a TOC, busybox marked
    // to prefetch), which start lazily: only what a start opens is read, by range.
    const esgz = imageFamily(join(work, "esgz"), {
      count: N,
      baseFiles: Math.max(1, Math.round(BASE_MB / FILE_MB)),
      baseFileBytes: FILE_MB * MiB,
      ownFiles: Math.max(1, Math.round(OWN_MB / FILE_MB)),
      ownFileBytes: FILE_MB * MiB,
      compression: "estargz",
      seed: "esgz",
    });
    registry = await startRegistry();
    await pushFamily(join(work, "fam"), fam.tags, registry.host, "fam");
    await pushFamily(join(work, "esgz"), esgz.tags, registry.host, "esgz");
    const p = await throttledProxy(registry.host, MBPS);
    proxy = p.server;
    const ref = (n: number) => `${p.host}/fam:i${n}`;
    console.log("pushed");
    const imageBytes = fam.baseBytes + fam.ownBytes;
    const unique = fam.baseBytes + N * fam.ownBytes;

    // The path before: one image pulled and unpacked whole into an empty store, no sharing.
    const store = new ImageStore({ dir: join(work, "whole"), allowPrivateRegistries: true });
    const w0 = performance.now();
    const img = await store.pull(ref(1));
    await store.unpack(img, join(work, "whole-rootfs"));
    out.wholePullUnpackMs = Math.round(performance.now() - w0);
    out.wholeDiskBytes = du(join(work, "whole"));
    rmSync(join(work, "whole"), { recursive: true, force: true });
    rmSync(join(work, "whole-rootfs"), { recursive: true, force: true });

    await cluster.start();
    const env = {
      // Info: the wait for node b's fills reads its "content complete" lines.
      AENV_LOG_LEVEL: "info",
      AENV_P2P: "1",
      AENV_ALLOW_PRIVATE_REGISTRIES: "1",
      AENV_IMAGE_ON_DEMAND: `${p.host}/`,
    };
    const a = (await cluster.startNode("a", env, { emptyTemplates: true })).url;
    const b = (await cluster.startNode("b", env, { emptyTemplates: true })).url;
    const firstA: number[] = [];
    const firstB: number[] = [];
    const localA: number[] = [];
    const localB: number[] = [];
    for (let n = 1; n <= N; n++) {
      const s = await start(a, ref(n), n);
      firstA.push(s.ms);
      await kill(a, s.id);
      const t = await start(b, ref(n), n);
      firstB.push(t.ms);
      await kill(b, t.id);
    }
    // b's background fills finish, then every image is local on both.
    const dirB = cluster.templatesDirOf.get("b") as string;
    let deadline = Date.now() + 600_000;
    while (
      (
        cluster.nodes
          .get("b")
          ?.logs()
          .match(/lazy image content complete/g) ?? []
      ).length < N
    ) {
      if (Date.now() > deadline) throw new Error("node b's fills did not finish");
      await new Promise((r) => setTimeout(r, 200));
    }
    for (let n = 1; n <= N; n++) {
      const s = await start(a, ref(n), n);
      localA.push(s.ms);
      await kill(a, s.id);
      const t = await start(b, ref(n), n);
      localB.push(t.ms);
      await kill(b, t.id);
    }
    // eStargz: the first start on node a of an image no node holds, read lazily from the
    // registry; then again once a's background fill has every file.
    const esgzRef = (n: number) => `${p.host}/esgz:i${n}`;
    const firstLazy: number[] = [];
    deadline = Date.now() + 600_000;
    const localLazy: number[] = [];
    for (let n = 1; n <= N; n++) {
      const s = await start(a, esgzRef(n), n);
      firstLazy.push(s.ms);
      await kill(a, s.id);
    }
    while (
      (
        cluster.nodes
          .get("a")
          ?.logs()
          .match(/lazy image content complete/g) ?? []
      ).length < N
    ) {
      if (Date.now() > deadline) throw new Error("node a's fills did not finish");
      await new Promise((r) => setTimeout(r, 200));
    }
    for (let n = 1; n <= N; n++) {
      const s = await start(a, esgzRef(n), n);
      localLazy.push(s.ms);
      await kill(a, s.id);
    }
    const dirA = cluster.templatesDirOf.get("a") as string;
    const sum = (xs: Summary) => ({ p50: Math.round(xs.p50), p95: Math.round(xs.p95), n: xs.n });
    Object.assign(out, {
      imageBytes,
      sumOfImages: N * imageBytes,
      uniqueContent: unique,
      // Node a holds both families (gzip and eStargz: different bytes), so twice the unique content.
      uniqueContentNodeA: 2 * unique,
      firstStartNoNode: sum(summarize(firstA)),
      firstStartFromPeer: sum(summarize(firstB)),
      startLocal: sum(summarize(localA)),
      startLocalLazyTree: sum(summarize(localB)),
      firstStartEStargz: sum(summarize(firstLazy)),
      startLocalEStargz: sum(summarize(localLazy)),
      // Layer blobs are a transfer cache a node drops first under its limit: disk is given with
      // them and without.
      diskA: du(dirA),
      diskAWithoutBlobs: du(dirA) - du(join(dirA, ".images", "blobs")),
      diskB: du(dirB),
    });
  } catch (err) {
    errors.push((err as Error).stack ?? String(err));
    console.error(err);
  } finally {
    await cluster.close().catch(() => {});
    proxy?.close();
    await registry?.stop();
    rmSync(work, { recursive: true, force: true });
  }
  finishMeta(meta, started);
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "images-latest.json"), `${JSON.stringify({ meta, ...out, errors }, null, 2)}\n`);
  const mb = (x: unknown) => (typeof x === "number" ? `${(x / 1e6).toFixed(0)} MB` : "–");
  const row = (x: unknown) => {
    const s = x as { p50: number; p95: number } | undefined;
    return s ? `${s.p50} / ${s.p95} ms` : "–";
  };
  console.log(`\n${N} images of ${BASE_MB} + ${OWN_MB} MB, registry at ${MBPS} MB/s\n`);
  console.log("| case | p50 / p95 |\n|:--|--:|");
  console.log(
    `| whole pull + unpack of one image, empty store, no sharing (before) | ${out.wholePullUnpackMs ?? "–"} ms |`,
  );
  console.log(
    `| first start, no node holds the image (node a: pull + unpack, base shared after the first) | ${row(out.firstStartNoNode)} |`,
  );
  console.log(`| first start, node a holds it (node b: lazy tree from a) | ${row(out.firstStartFromPeer)} |`);
  console.log(`| start once local (node a, unpacked tree) | ${row(out.startLocal)} |`);
  console.log(`| start once local (node b, lazy tree, content complete) | ${row(out.startLocalLazyTree)} |`);
  console.log(
    `| first start of an eStargz image no node holds (node a: read by range, lazily) | ${row(out.firstStartEStargz)} |`,
  );
  console.log(`| start of that eStargz image once local (node a, content complete) | ${row(out.startLocalEStargz)} |`);
  console.log(
    `\ndisk: sum of images ${mb(out.sumOfImages)}, unique content ${mb(out.uniqueContent)}; node a (both families: ${mb(out.uniqueContentNodeA)} unique) ${mb(out.diskA)} (${mb(out.diskAWithoutBlobs)} without layer blobs), node b ${mb(out.diskB)}; one image whole, no sharing: ${mb(out.wholeDiskBytes)}`,
  );
  console.log(`\n${join(RESULTS, "images-latest.json")}`);
  if (errors.length) process.exit(1);
}

await main();
