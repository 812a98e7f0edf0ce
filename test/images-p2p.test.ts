// Image layers between the nodes of a cluster (cluster.p2p): a node that starts an image
// another node holds takes its layers from that node, not the registry; a layer a peer gets
// wrong is refused and fetched from the registry; the gateway places a create naming an image
// on a node that holds it. Real runsc nodes, Redis, gateway and Debian's docker-registry
// behind a proxy that counts what the registry is asked.
import assert from "node:assert/strict";
import { closeSync, mkdtempSync, openSync, readSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { type Proxy, type Registry, startProxy, startRegistry } from "../packages/server/test/helpers/registry.js";
import { API_KEY, TestCluster, via } from "./helpers/cluster.js";
import { imageFamily, pushFamily } from "./helpers/image-family.js";

const MiB = 1024 * 1024;
const cluster = new TestCluster("aep");
let registry: Registry;
let proxy: Proxy;
let gateway: string;
let work: string;
const created: Array<{ url: string; id: string }> = [];

const ref = (n: number) => `${proxy.host}/fam:i${n}`;
/** Layer blobs the registry was asked for so far (configs are small; layers are over 64 KiB). */
const blobGets = () => proxy.requests.filter((r) => /^GET \/v2\/fam\/blobs\/sha256:/.test(r));

async function createOn(url: string, templateID: string): Promise<string> {
  const res = await fetch(`${url}/sandboxes`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": API_KEY },
    body: JSON.stringify({ templateID, timeout: 120 }),
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
  proxy = await startProxy(registry.host);
  await cluster.start();
  const env = {
    AENV_P2P: "1",
    AENV_ALLOW_PRIVATE_REGISTRIES: "1",
    AENV_IMAGE_ON_DEMAND: `${proxy.host}/`,
  };
  await cluster.startNode("a", env);
  await cluster.startNode("b", env);
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
