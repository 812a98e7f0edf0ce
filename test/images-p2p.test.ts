// Images between the nodes of a cluster (cluster.p2p): a node that starts an image another
// node holds takes its layers from that node, not the registry, and a layer a peer gets wrong
// is refused and fetched from the registry (node b, images.lazy off); a node with lazy trees
// starts the image from a holder's tree before its content is here, a file's content fetched
// when first read and verified, a wrong one fetched from the next holder (node c); the gateway
// places a create naming an image on a node that holds it. Real runsc nodes, Redis, gateway and Debian's docker-registry
// behind a proxy that counts what the registry is asked.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { rendezvous } from "../packages/server/src/util/rendezvous.js";
import {
  type Registry,
  type Proxy as RegistryProxy,
  startProxy,
  startRegistry,
} from "../packages/server/test/helpers/registry.js";
import { API_KEY, TestCluster, via } from "./helpers/cluster.js";
import { imageFamily, pushFamily } from "./helpers/image-family.js";

const MiB = 1024 * 1024;
const cluster = new TestCluster("aep");
let registry: Registry;
let proxy: RegistryProxy;
let gateway: string;
let work: string;
const created: Array<{ url: string; id: string }> = [];

const ref = (n: number) => `${proxy.host}/fam:i${n}`;
const ref2 = (n: number) => `${proxy.host}/fam2:i${n}`;
/** Layer blobs the registry was asked for so far (configs are small; layers are over 64 KiB). */
const blobGets = () => proxy.requests.filter((r) => /^GET \/v2\/fam\/blobs\/sha256:/.test(r));

async function createOn(url: string, templateID: string): Promise<string> {
  const res = await fetch(`${url}/sandboxes`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": API_KEY },
    body: JSON.stringify({ templateID, timeout: 120 }),
    signal: AbortSignal.timeout(90_000),
  });
  const body = (await res.json()) as { sandboxID?: string };
  assert.equal(res.status, 201, JSON.stringify(body));
  created.push({ url, id: body.sandboxID as string });
  return body.sandboxID as string;
}

async function run(url: string, id: string, cmd: string): Promise<string> {
  const sbx = await Sandbox.connect(id, via(url));
  return (await sbx.commands.run(cmd)).stdout;
}

before(async () => {
  work = mkdtempSync("/var/tmp/aenv-p2p-");
  registry = await startRegistry();
  const fam = imageFamily(join(work, "fam"), {
    count: 3,
    baseFiles: 3,
    baseFileBytes: 2 * MiB,
    ownFiles: 2,
    ownFileBytes: 1 * MiB,
  });
  await pushFamily(join(work, "fam"), fam.tags, registry.host, "fam");
  const fam2 = imageFamily(join(work, "fam2"), {
    count: 4,
    baseFiles: 3,
    baseFileBytes: 2 * MiB,
    ownFiles: 1,
    ownFileBytes: 64 * 1024,
    seed: "fam2-",
  });
  await pushFamily(join(work, "fam2"), fam2.tags, registry.host, "fam2");
  proxy = await startProxy(registry.host);
  await cluster.start();
  const env = {
    AENV_P2P: "1",
    AENV_ALLOW_PRIVATE_REGISTRIES: "1",
    AENV_IMAGE_ON_DEMAND: `${proxy.host}/`,
  };
  await cluster.startNode("a", env);
  await cluster.startNode("b", { ...env, AENV_IMAGE_LAZY: "0" });
  await cluster.startNode("c", env);
  gateway = await cluster.startGateway();
});

after(async () => {
  for (const c of created) {
    await fetch(`${c.url}/sandboxes/${c.id}`, { method: "DELETE", headers: { "x-api-key": API_KEY } }).catch(() => {});
  }
  await cluster.close();
  await proxy.close();
  await registry.stop();
  rmSync(work, { recursive: true, force: true });
});

describe("image layers between nodes", () => {
  test("a second node takes an image's layers from the first, not the registry", async () => {
    const a = cluster.nodes.get("a")!.url;
    const b = cluster.nodes.get("b")!.url;
    const before = blobGets().length;
    const onA = await createOn(a, ref(1));
    assert.equal(await run(a, onA, "cat /id.txt"), "image 1\n");
    const fromRegistry = blobGets().length - before;
    assert.ok(fromRegistry >= 3, "node a fetched config and both layers from the registry");
    const mid = blobGets().length;
    const onB = await createOn(b, ref(1));
    assert.equal(await run(b, onB, "cat /id.txt; cat /shared/f2 | wc -c"), `image 1\n${2 * MiB}\n`);
    const asked = blobGets().slice(mid);
    assert.equal(asked.length, 1, `node b asked the registry only for the config: ${asked.join(", ")}`);
    assert.match(cluster.nodes.get("b")!.logs(), /from peer a/);
  });

  test("a layer a peer sends wrong is refused and fetched from the registry", async () => {
    const a = cluster.nodes.get("a")!.url;
    const b = cluster.nodes.get("b")!.url;
    const before = blobGets().length;
    await createOn(a, ref(2));
    const own = blobGets()
      .slice(before)
      .map((r) => r.replace(/^GET \/v2\/fam\/blobs\//, ""))
      .map((d) => join(cluster.templatesDirOf.get("a")!, ".images", "blobs", "sha256", d.slice(7)))
      .filter((p) => statSync(p).size > 64 * 1024);
    assert.equal(own.length, 1, "node a fetched image 2's own layer");
    // Same size, other bytes: only the digest can tell.
    const fd = openSync(own[0] as string, "r+");
    const buf = Buffer.alloc(4096);
    readSync(fd, buf, 0, buf.length, 8192);
    for (let i = 0; i < buf.length; i++) buf[i] = (buf[i] as number) ^ 0xff;
    writeSync(fd, buf, 0, buf.length, 8192);
    closeSync(fd);
    const mid = blobGets().length;
    const onB = await createOn(b, ref(2));
    assert.equal(await run(b, onB, "cat /id.txt"), "image 2\n");
    assert.equal(blobGets().length - mid, 2, "config and the refused layer came from the registry");
    assert.match(cluster.nodes.get("b")!.logs(), /refused from peer a: .*digest mismatch/);
  });

  test("a node starts an image from a holder's tree before its content is here; a wrong file comes from the next holder", async () => {
    const c = cluster.nodes.get("c")!.url;
    // Image 1 is held by a and b. The content of one of its files is spoiled on whichever of
    // them c asks first for it (rendezvous order): c must refuse it and ask the other.
    const tpl = (
      (await (
        await fetch(`${cluster.nodes.get("a")!.url}/templates`, { headers: { "x-api-key": API_KEY } })
      ).json()) as Array<{ templateID: string; fromImage?: string }>
    ).find((t) => t.fromImage === ref(1));
    assert.ok(tpl);
    const index = JSON.parse(
      readFileSync(join(cluster.templatesDirOf.get("a")!, tpl.templateID, "index-r1.json"), "utf8"),
    ) as { entries: Array<{ p: string; k?: string }> };
    const key = index.entries.find((e) => e.p === "own/f1")?.k as string;
    assert.ok(key);
    const first = rendezvous([{ name: "a" }, { name: "b" }], key)[0]?.name as string;
    const entry = join(cluster.templatesDirOf.get(first)!, ".images", "files", "sha256", key.slice(0, 2), key);
    const fd = openSync(entry, "r+");
    writeSync(fd, Buffer.from("spoiled"), 0, 7, 0);
    closeSync(fd);
    const before = blobGets().length;
    const t0 = Date.now();
    const onC = await createOn(c, ref(1)).catch((err: Error) => {
      const log = /see (\S+runsc\.log)/.exec(err.message)?.[1];
      const dirC = cluster.templatesDirOf.get("c")!;
      const lazyLogs = execFileSync("sh", ["-c", `cat ${dirC}/*/lazyfs-*.log`], { encoding: "utf8" });
      throw new Error(`${err.message}\n${log ? readFileSync(log, "utf8").slice(-4000) : ""}\n${lazyLogs}`);
    });
    const started = Date.now() - t0;
    const out = await run(c, onC, "cat /id.txt; cat /own/f1 | sha256sum | cut -c1-64").catch((err: Error) => {
      const dirC = cluster.templatesDirOf.get("c")!;
      const lazyLogs = execFileSync("sh", ["-c", `cat ${dirC}/*/lazyfs-*.log`], { encoding: "utf8" });
      const nodeLogs = cluster.nodes
        .get("c")!
        .logs()
        .split("\n")
        .filter((l) => /lazy|peer|content|tree/.test(l));
      throw new Error(`${err.message}\n${lazyLogs}\n${nodeLogs.join("\n")}`);
    });
    assert.equal(out, `image 1\n${key.slice(0, 64)}\n`);
    assert.equal(
      blobGets().length,
      before,
      `c fetched no layer from the registry: ${cluster.nodes
        .get("c")!
        .logs()
        .split("\n")
        .filter((l) => /peer|lazy|tree/.test(l))
        .join("\n")}`,
    );
    const logs = cluster.nodes.get("c")!.logs();
    assert.match(logs, /image started on demand from a peer's tree/);
    assert.match(logs, /"from":"b"[^\n]*"msg":"content refused"/);
    // The rest arrives in the background; then c holds the tree and publishes it, and the
    // tree settles into a plain one (its FUSE mount detached).
    for (let i = 0; i < 100 && !/lazy tree settled/.test(cluster.nodes.get("c")!.logs()); i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.match(cluster.nodes.get("c")!.logs(), /lazy image content complete/);
    assert.match(cluster.nodes.get("c")!.logs(), /lazy tree settled into a plain tree/);
    assert.doesNotMatch(
      readFileSync("/proc/self/mountinfo", "utf8"),
      new RegExp(`${cluster.templatesDirOf.get("c")!}\\S* .*aenv-lazyfs`),
    );
    assert.ok(started < 30_000);
  });

  test("an image tree outlives a crash of its node: the restarted node starts from it again", async () => {
    const old = cluster.nodes.get("c")!;
    await old.crash();
    const again = await old.restart();
    cluster.nodes.set("c", again);
    const id = await createOn(again.url, ref(1));
    assert.equal(await run(again.url, id, "cat /id.txt /own/f0 | wc -c"), `${8 + MiB}\n`);
    assert.doesNotMatch(again.logs(), /image started on demand/, "no new pull, no new tree");
  });

  test("the gateway places the first start of an image no node holds on the node holding most of its layers", async () => {
    // A second family: its base layer is on no node yet.
    const b = cluster.nodes.get("b")!;
    await createOn(b.url, ref2(1));
    // Node b now holds the family's base (and ref2(1)'s own layer); ref2(2) and ref2(3) share that base.
    for (const n of [2, 3]) {
      const id = await createOn(gateway, ref2(n));
      assert.equal(await cluster.ownerOf(id), "b", `ref2(${n}) placed where its base layer is`);
      assert.equal(await run(gateway, id, "cat /id.txt"), `image ${n}\n`);
    }
    const logs = cluster.gateways.map((g) => g.logs()).join("\n");
    assert.match(logs, /placing by shared content/);
    // Through /sandboxes-cold as well: a fourth image of the family.
    const res = await fetch(`${gateway}/sandboxes-cold`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": API_KEY },
      body: JSON.stringify({ image: ref2(4), timeout: 120 }),
      signal: AbortSignal.timeout(90_000),
    });
    const body = (await res.json()) as { sandboxID?: string };
    assert.equal(res.status, 201, JSON.stringify(body));
    created.push({ url: gateway, id: body.sandboxID as string });
    assert.equal(await cluster.ownerOf(body.sandboxID as string), "b");
  });

  test("the gateway places a create naming an image on a node that holds it", async () => {
    const a = cluster.nodes.get("a")!.url;
    await createOn(a, ref(3));
    await cluster.nextHeartbeat("a");
    for (let i = 0; i < 3; i++) {
      const id = await createOn(gateway, ref(3));
      assert.equal(await cluster.ownerOf(id), "a");
    }
  });
});

describe("snapshot chunks between nodes", () => {
  /** Chunk files in the shared repository (posix_fs). */
  const repoChunks = () =>
    execFileSync("find", [cluster.repo, "-name", "*.zst"], { encoding: "utf8" }).split("\n").filter(Boolean);
  const metric = async (url: string, line: RegExp) =>
    Number(line.exec(await (await fetch(`${url}/metrics`)).text())?.[1] ?? Number.NaN);

  test("a node starts a snapshot from the chunks a peer holds; a chunk the peer sends wrong comes from the repository", async () => {
    const a = cluster.nodes.get("a")!;
    const b = cluster.nodes.get("b")!;
    const src = await createOn(a.url, "base");
    await run(a.url, src, "echo snapped > /home/user/s.txt");
    const before = new Set(repoChunks());
    const res = await fetch(`${a.url}/sandboxes/${src}/snapshots`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": API_KEY },
      body: "{}",
    });
    const snap = (await res.json()) as { snapshotID: string };
    assert.equal(res.status, 201, JSON.stringify(snap));
    const committed = new RegExp(`"snapshotID":"${snap.snapshotID}"[^\\n]*snapshot committed to the repository`);
    for (let i = 0; i < 600 && !committed.test(a.logs()); i++) await new Promise((r) => setTimeout(r, 100));
    assert.match(a.logs(), committed);
    // What the snapshot added to the repository leaves it but one chunk, and that one is
    // spoiled where node a serves it from (its snapshot image; same size, other bytes: only
    // the digest tells).
    const manifest = JSON.parse(
      (JSON.parse(readFileSync(join(cluster.repo, "manifests", `${snap.snapshotID}.json`), "utf8")) as { body: string })
        .body,
    ) as { files: Array<{ chunks: Array<{ sha256: string }> }> };
    const own = new Set(manifest.files.flatMap((f) => f.chunks.map((c) => c.sha256)));
    const added = repoChunks().filter((f) => !before.has(f) && own.has(f.replace(/^.*\/([0-9a-f]{64})\.zst$/, "$1")));
    assert.ok(added.length >= 2, `${added.length} new chunks`);
    const [kept, ...gone] = added as [string, ...string[]];
    for (const f of gone) rmSync(f);
    const bytes = execFileSync("zstd", ["-dc", kept], { maxBuffer: 64 * MiB });
    const imageDir = join(a.dataDir, "snapshots", snap.snapshotID);
    let spoiled = 0;
    for (const f of execFileSync("find", [imageDir, "-type", "f"], { encoding: "utf8" }).split("\n").filter(Boolean)) {
      const content = readFileSync(f);
      const fd = openSync(f, "r+");
      for (let at = content.indexOf(bytes); at >= 0; at = content.indexOf(bytes, at + bytes.length)) {
        writeSync(fd, Buffer.alloc(bytes.length, 0x5a), 0, bytes.length, at);
        spoiled++;
      }
      closeSync(fd);
    }
    assert.ok(spoiled > 0, "the kept chunk is in a's snapshot image");
    const peerLine = /^aenv_chunk_cache_requests_total\{result="peer"\} (\d+)$/m;
    const refusedLine = /^aenv_chunk_peer_refused_total (\d+)$/m;
    const peerBefore = await metric(b.url, peerLine);
    const refusedBefore = await metric(b.url, refusedLine);
    const onB = await createOn(b.url, snap.snapshotID);
    assert.equal(await run(b.url, onB, "cat /home/user/s.txt"), "snapped\n");
    assert.ok(
      (await metric(b.url, peerLine)) - peerBefore >= gone.length,
      "the chunks gone from the repository came from a",
    );
    assert.equal((await metric(b.url, refusedLine)) - refusedBefore, 1, "a's spoiled chunk was refused");
  });
});
