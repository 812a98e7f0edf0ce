// Images started on demand from a real registry (Debian's docker-registry on loopback): a
// create names an image as its template, content shared between images is stored once, and
// the templates folder stays under images.cache_max_bytes while many images start, evicting
// least recently used images no sandbox uses and refusing (503) when everything left is in use.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { gunzipSync } from "node:zlib";
import { Sandbox } from "e2b";
import { detachMountsUnder } from "../packages/server/src/util/mounts.js";
import {
  type Registry,
  type Proxy as RegistryProxy,
  startProxy,
  startRegistry,
} from "../packages/server/test/helpers/registry.js";
import { imageFamily, pushFamily, seededBytes } from "./helpers/image-family.js";
import { cleanupDataDir, startServer, TEMPLATES_DIR, type TestServer, useE2b } from "./helpers/server.js";

const MiB = 1024 * 1024;
const LIMIT = 40 * MiB;

let registry: Registry;
/** In front of the registry, for the eStargz images: counts requests and their ranges. */
let proxy: RegistryProxy;
let server: TestServer;
let work: string;
let templatesDir: string;
const sandboxes: string[] = [];

const du = () =>
  Number(execFileSync("du", ["-sx", "--block-size=1", templatesDir], { encoding: "utf8" }).split("\t")[0]);
const ref = (n: number) => `${registry.host}/fam:i${n}`;

interface ListedTemplate {
  templateID: string;
  fromImage?: string;
}
async function templateOf(image: string): Promise<ListedTemplate | undefined> {
  const all = (await server.api("GET", "/templates")).body as ListedTemplate[];
  return all.find((t) => t.fromImage === image);
}

async function create(n: number): Promise<{ status: number; id?: string; body: unknown; headers: Headers }> {
  const res = await fetch(`${server.url}/sandboxes`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": server.apiKey },
    body: JSON.stringify({ templateID: ref(n), timeout: 120 }),
  });
  const body = (await res.json()) as { sandboxID?: string };
  if (body.sandboxID) sandboxes.push(body.sandboxID);
  return { status: res.status, body, headers: res.headers, ...(body.sandboxID ? { id: body.sandboxID } : {}) };
}

async function kill(id: string): Promise<void> {
  await server.api("DELETE", `/sandboxes/${id}`);
}

before(async () => {
  work = mkdtempSync("/var/tmp/aenv-ondemand-");
  registry = await startRegistry();
  // Three 2 MiB files shared by every image, three of each image's own: ~7.5 MiB of base
  // (busybox included) and 6 MiB per image, in blobs and again unpacked.
  const fam = imageFamily(join(work, "fam"), {
    count: 8,
    baseFiles: 3,
    baseFileBytes: 2 * MiB,
    ownFiles: 3,
    ownFileBytes: 2 * MiB,
  });
  await pushFamily(join(work, "fam"), fam.tags, registry.host, "fam");
  // The same shape as eStargz: each file its own gzip member, a TOC, busybox marked to prefetch.
  const esgz = imageFamily(join(work, "esgz"), {
    count: 1,
    baseFiles: 3,
    baseFileBytes: 2 * MiB,
    ownFiles: 3,
    ownFileBytes: 2 * MiB,
    compression: "estargz",
    seed: "esgz",
  });
  await pushFamily(join(work, "esgz"), esgz.tags, registry.host, "esgz");
  proxy = await startProxy(registry.host);
  templatesDir = join(work, "templates");
  mkdirSync(templatesDir);
  mkdirSync(join(TEMPLATES_DIR, ".warm"), { recursive: true });
  symlinkSync(join(TEMPLATES_DIR, ".warm"), join(templatesDir, ".warm"));
  server = await startServer({
    templatesDir,
    env: {
      AENV_ALLOW_PRIVATE_REGISTRIES: "1",
      AENV_IMAGE_ON_DEMAND: `${registry.host}/,${proxy.host}/`,
      AENV_IMAGE_CACHE_MAX_BYTES: String(LIMIT),
    },
  });
  useE2b(server);
});

after(async () => {
  for (const id of sandboxes) await server.api("DELETE", `/sandboxes/${id}`).catch(() => {});
  await server.stop();
  cleanupDataDir(server);
  await registry.stop();
  await proxy.close();
  // Lazily served image trees outlive their server (aenv-lazyfs runs on its own).
  detachMountsUnder(work);
  rmSync(work, { recursive: true, force: true });
});

describe("images on demand", () => {
  test("the e2b SDK starts an image by naming it as the template; a name no rule allows is a 404", async () => {
    const sbx = await Sandbox.create(ref(1), { timeoutMs: 300_000 });
    sandboxes.push(sbx.sandboxId);
    const r = await sbx.commands.run("cat /id.txt; whoami; ls /shared | wc -l");
    assert.equal(r.stdout, "image 1\nroot\n3\n");
    assert.ok(du() <= LIMIT, `the templates folder holds ${du()} bytes, over ${LIMIT}`);
    const other = await server.api("POST", "/sandboxes", { templateID: "127.0.0.2:1/not-allowed:1" });
    assert.equal(other.status, 404);
    const missing = await create(99);
    assert.equal(missing.status, 400, JSON.stringify(missing.body));
    assert.match((missing.body as { message: string }).message, /fam:i99/);
  });

  test("content shared by two images is one inode on disk", async () => {
    const two = await create(2);
    assert.equal(two.status, 201, JSON.stringify(two.body));
    const t1 = await templateOf(ref(1));
    const t2 = await templateOf(ref(2));
    assert.ok(t1 && t2);
    const file = (t: ListedTemplate) => join(templatesDir, t.templateID, "rootfs-r1", "shared", "f0");
    assert.equal(statSync(file(t1)).ino, statSync(file(t2)).ino);
    assert.notEqual(
      statSync(join(templatesDir, t1.templateID, "rootfs-r1", "own", "f0")).ino,
      statSync(join(templatesDir, t2.templateID, "rootfs-r1", "own", "f0")).ino,
    );
    await kill(two.id as string);
  });

  test("many images start within the limit; what a sandbox uses is never evicted", async () => {
    for (const n of [3, 4, 5, 6]) {
      const c = await create(n);
      assert.equal(c.status, 201, `image ${n}: ${JSON.stringify(c.body)}`);
      await kill(c.id as string);
      assert.ok(du() <= LIMIT, `after image ${n} the templates folder holds ${du()} bytes, over ${LIMIT}`);
    }
    assert.ok(await templateOf(ref(1)), "image 1's sandbox runs: its template stays");
    assert.equal(await templateOf(ref(2)), undefined, "the least recently used unused image went first");
    const sbx = await Sandbox.connect(sandboxes[0] as string);
    assert.equal((await sbx.commands.run("cat /own/f2 | wc -c")).stdout.trim(), String(2 * MiB));
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const evicted = Number(/aenv_image_cache_evictions_total\{kind="template"\} (\d+)/.exec(metrics)?.[1]);
    assert.ok(evicted >= 1, "evictions are counted");
    assert.match(metrics, /aenv_image_cache_bytes\{kind="max"\} 41943040/);
    // An image started again is pulled again (its template went) and works.
    const again = await create(2);
    assert.equal(again.status, 201);
    await kill(again.id as string);
  });

  test("when everything left is in use, a start is a 503 with Retry-After and nothing is over the limit", async () => {
    let refused: Awaited<ReturnType<typeof create>> | undefined;
    for (const n of [3, 4, 5, 6, 7, 8]) {
      const c = await create(n);
      if (c.status !== 201) {
        refused = c;
        break;
      }
    }
    assert.ok(refused, "some start was refused");
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.match((refused.body as { message: string }).message, /image cache is full/);
    assert.equal((refused.body as { error_code?: string }).error_code, "sandbox_capacity_unavailable");
    assert.ok(Number(refused.headers.get("retry-after")) > 0);
    assert.ok(du() <= LIMIT, `the templates folder holds ${du()} bytes, over ${LIMIT}`);
    // Every running sandbox still works.
    for (const id of sandboxes.slice(0, 2)) {
      const sbx = await Sandbox.connect(id).catch(() => undefined);
      if (sbx) assert.match((await sbx.commands.run("cat /id.txt")).stdout, /^image \d\n$/);
    }
  });
});

describe("eStargz images start lazily", () => {
  test("a sandbox runs before its layers are fetched; files come by range; a restart serves what the fill missed; the complete tree settles into a plain one", async () => {
    for (const id of sandboxes.splice(0)) await kill(id).catch(() => {});
    const image = `${proxy.host}/esgz:i1`;
    // Until the server's restart the registry fails to send /own/f2: its chunks are known by
    // their bytes once inflated (the family's files are seeded).
    const f2 = seededBytes("esgzown-1-2", 2 * MiB);
    const marks = [f2.subarray(0, 64), f2.subarray(MiB, MiB + 64)];
    proxy.refusingBody = (body, line) => {
      if (!line.includes(" range=")) return false;
      try {
        const raw = gunzipSync(body);
        return marks.some((m) => raw.includes(m));
      } catch {
        return false;
      }
    };
    proxy.requests.length = 0;
    const sbx = await Sandbox.create(image, { timeoutMs: 300_000 });
    sandboxes.push(sbx.sandboxId);
    const r = await sbx.commands.run("cat /id.txt; head -c 100 /own/f0 | wc -c");
    assert.equal(r.stdout, "image 1\n100\n");
    const blobGets = proxy.requests.filter((x) => x.startsWith("GET /v2/esgz/blobs/"));
    const whole = blobGets.filter((x) => !x.includes(" range="));
    // The config is the one blob fetched whole; every layer byte came by range.
    assert.equal(whole.length, 1, `whole blobs fetched: ${whole.join(", ")}`);
    assert.ok(blobGets.length > 4, "footer, TOC and files by range");
    const t = await templateOf(image);
    assert.ok(t, "the image has a template");
    const rootfs = join(templatesDir, t.templateID, "rootfs-r1");
    const mountedAt = () =>
      readFileSync("/proc/self/mountinfo", "utf8")
        .split("\n")
        .some((l) => l.split(" ")[4] === rootfs);
    const files = join(templatesDir, ".images", "files", "sha256");
    const index = JSON.parse(readFileSync(join(templatesDir, t.templateID, "index-r1.json"), "utf8")) as {
      entries: Array<{ p: string; k?: string }>;
    };
    const key = index.entries.find((e) => e.p === "own/f2")?.k as string;
    assert.equal(key.slice(0, 64), createHash("sha256").update(f2).digest("hex"));

    // Without /own/f2 the fill ends incomplete: the tree stays served by its FUSE server.
    await waitFor(() => /lazy image content incomplete/.test(server.logs()), "the fill to end without /own/f2");
    assert.equal(mountedAt(), true, "still mounted");
    assert.doesNotMatch(server.logs(), /lazy tree settled/);
    await sbx.kill();
    sandboxes.pop();

    // After a crash and restart, the registry whole again, the file comes by range (opened, or
    // by the restarted fill): the tree's runs were kept beside its index.
    proxy.refusingBody = undefined;
    const again = await startAfterCrash(image);
    assert.equal((await again.commands.run("sha256sum /own/f2 | cut -c1-64")).stdout.trim(), key.slice(0, 64));
    assert.ok(
      proxy.requests.some((x) => x.includes(" range=")),
      "the missing file came by range from the registry",
    );

    // Its content all here, the tree settles into a plain one under the same path: no FUSE
    // mount there any more, each file a hard link into the content store.
    await waitFor(() => /lazy tree settled into a plain tree/.test(server.logs()), "the tree to settle");
    assert.equal(mountedAt(), false, "the FUSE mount is detached");
    assert.equal(statSync(join(rootfs, "own/f2")).ino, statSync(join(files, key.slice(0, 2), key)).ino);
    // The sandbox started on the mount still reads through it (its FUSE server stays for it);
    // paused, its memory image restores on the plain tree, which has the same files.
    assert.equal((await again.commands.run("sha256sum /own/f2 | cut -c1-64")).stdout.trim(), key.slice(0, 64));
    await again.commands.run("echo kept > /tmp/mem.txt");
    // pgrep leaves itself out; a shell around it would match its own command line.
    const lazyfs = () =>
      spawnSync("pgrep", ["-f", `aenv-lazyfs .*${t.templateID}`], { encoding: "utf8" }).stdout.trim();
    assert.notEqual(lazyfs(), "", "its FUSE server serves the sandbox started on it");
    assert.equal(await again.pause(), true);
    // The last user of the detached mount is gone: its server ends.
    await waitFor(() => lazyfs() === "", "the FUSE server to exit once no sandbox uses its mount");
    const back = await Sandbox.connect(again.sandboxId, { timeoutMs: 300_000 });
    assert.equal((await back.commands.run("cat /tmp/mem.txt; cat /id.txt")).stdout, "kept\nimage 1\n");
    const f1 = index.entries.find((e) => e.p === "own/f1")?.k as string;
    assert.equal((await back.commands.run("sha256sum /own/f1 | cut -c1-64")).stdout.trim(), f1.slice(0, 64));
    await back.kill();
    sandboxes.pop();

    // Another restart keeps it settled: nothing is mounted again, nothing fetched.
    const third = await startAfterCrash(image);
    assert.equal((await third.commands.run("sha256sum /own/f2 | cut -c1-64")).stdout.trim(), key.slice(0, 64));
    assert.equal(mountedAt(), false, "not mounted again");
    assert.equal(proxy.requests.filter((x) => x.includes(" range=")).length, 0, "nothing fetched again");
  });
});

/** Crashes the server, restarts it, and starts `image` there; the proxy's request log starts afresh. */
async function startAfterCrash(image: string): Promise<Sandbox> {
  proxy.requests.length = 0;
  await server.crash();
  server = await server.restart();
  useE2b(server);
  const sbx = await Sandbox.create(image, { timeoutMs: 300_000 });
  sandboxes.push(sbx.sandboxId);
  return sbx;
}

async function waitFor(ok: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
