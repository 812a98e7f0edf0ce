// Images started on demand from a real registry (Debian's docker-registry on loopback): a
// create names an image as its template, content shared between images is stored once, and
// the templates folder stays under images.cache_max_bytes while many images start, evicting
// least recently used images no sandbox uses and refusing (503) when everything left is in use.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { detachMountsUnder } from "../packages/server/src/util/mounts.js";
import {
  type Registry,
  type Proxy as RegistryProxy,
  startProxy,
  startRegistry,
} from "../packages/server/test/helpers/registry.js";
import { imageFamily, pushFamily } from "./helpers/image-family.js";
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
  test("a sandbox runs before its layers are fetched; files come by range; a restart serves the rest", async () => {
    for (const id of sandboxes.splice(0)) await kill(id).catch(() => {});
    const image = `${proxy.host}/esgz:i1`;
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

    // A file whose content is not here yet (its entry removed, as if the fill had not reached
    // it) is fetched by range after a crash and restart of the server: the tree's runs were
    // kept beside its index.
    await sbx.kill();
    sandboxes.pop();
    const files = join(templatesDir, ".images", "files", "sha256");
    const index = JSON.parse(
      execFileSync("cat", [join(templatesDir, t.templateID, "index-r1.json")], { encoding: "utf8" }),
    ) as { entries: Array<{ p: string; k?: string }> };
    const key = index.entries.find((e) => e.p === "own/f2")?.k as string;
    await waitFor(() => existsSync(join(files, key.slice(0, 2), key)), "the background fill");
    rmSync(join(files, key.slice(0, 2), key));
    proxy.requests.length = 0;
    await server.crash();
    server = await server.restart();
    useE2b(server);
    const again = await Sandbox.create(image, { timeoutMs: 300_000 });
    sandboxes.push(again.sandboxId);
    const sum = await again.commands.run("sha256sum /own/f2 | cut -c1-64");
    assert.equal(sum.stdout.trim(), key.slice(0, 64));
    assert.ok(
      proxy.requests.some((x) => x.includes(" range=")),
      "the missing file came by range from the registry (opened, or by the restarted fill)",
    );
  });
});

async function waitFor(ok: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
