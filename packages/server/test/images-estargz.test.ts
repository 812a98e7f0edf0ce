/**
 * eStargz images read by range from a real registry (Debian's docker-registry on loopback): the
 * tree built from the layers' TOCs is the tree a whole pull unpacks, every file read by range is
 * its content, and bytes or a TOC that do not match what the manifest pins are refused.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, request as httpRequest, type Server } from "node:http";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { convertToEStargz } from "../src/storage/images/convert.js";
import { ContentStore, ImageStore, metaOfKey } from "../src/storage/images/index.js";
import { NotSeekable, readRun, seekableTree } from "../src/templates/seekable-tree.js";
import { indexTree } from "../src/templates/tree-index.js";
import { estargzLayer } from "./helpers/estargz.js";
import { freePort, makeTar, OciLayout, push, type Registry, startProxy, startRegistry } from "./helpers/registry.js";

const root = mkdtempSync("/var/tmp/aenv-estargz-test-");
let registry: Registry;
const layout = new OciLayout(join(root, "layout"));
const big = randomBytes(3 * 1024 * 1024 + 123);

const lower = [
  { name: "etc/", type: "dir" as const },
  { name: "etc/a.txt", content: "one" },
  { name: "etc/gone.txt", content: "bye" },
  { name: "etc/opq/", type: "dir" as const },
  { name: "etc/opq/old", content: "x" },
  { name: "bin/", type: "dir" as const },
  { name: "bin/tool", content: "tool", mode: 0o4755 },
  { name: "lib", type: "symlink" as const, linkname: "usr/lib" },
  { name: "usr/lib/libx.so", content: "libx" },
  { name: "data/big.bin", content: big },
  { name: "data/empty" },
  { name: "dev/null", type: "char" as const },
];
const upper = [
  { name: "etc/.wh.gone.txt" },
  { name: "etc/opq/", type: "dir" as const },
  { name: "etc/opq/.wh..wh..opq" },
  { name: "etc/opq/new", content: "new" },
  { name: "etc/a.txt", content: "three", uid: 1234, gid: 5678, mode: 0o640 },
  { name: "usr/bin/tool2", type: "hardlink" as const, linkname: "bin/tool" },
  { name: "home/user/", type: "dir" as const, uid: 1000, gid: 1000, mode: 0o750 },
  { name: `deep/${"d".repeat(120)}/file`, content: "long name via pax" },
];
const config = { Env: ["PATH=/usr/bin:/bin"], WorkingDir: "/home/user", User: "user" };
const esgz = layout.image({
  layers: [
    { estargz: estargzLayer(lower, { chunkSize: 1024 * 1024, prefetch: ["bin/tool", "etc/a.txt"] }) },
    { estargz: estargzLayer(upper) },
  ],
  config,
});
layout.tag(esgz, "esgz");
const plain = layout.image({ layers: [{ tar: makeTar(lower), compression: "gzip" }], config });
layout.tag(plain, "plain");
// The same two layers as plain gzip (zstd for one): what convert-image rewrites.
const plain2 = layout.image({
  layers: [
    { tar: makeTar(lower), compression: "gzip" },
    { tar: makeTar(upper), compression: "zstd" },
  ],
  config,
});
layout.tag(plain2, "plain2");
// The TOC the annotation pins is not the one in the layer.
const other = estargzLayer([{ name: "x", content: "x" }]);
const lying = layout.image({
  layers: [{ estargz: { ...estargzLayer([{ name: "y", content: "y" }]), tocDigest: other.tocDigest } }],
});
layout.tag(lying, "lying");

const store = (name: string) =>
  new ImageStore({
    dir: join(root, "stores", name),
    authFile: join(root, "no-auth.json"),
    allowPrivateRegistries: true,
  });

/** A proxy in front of the registry that flips one byte of every range response. */
async function spoilingProxy(upstream: string): Promise<{ host: string; close(): Promise<void> }> {
  const port = await freePort();
  const server: Server = createServer((req, res) => {
    const [uh, up] = upstream.split(":");
    const preq = httpRequest(
      { host: uh, port: Number(up), method: req.method, path: req.url, headers: { ...req.headers, host: upstream } },
      (pres) => {
        if (pres.statusCode !== 206) {
          res.writeHead(pres.statusCode ?? 502, pres.headers);
          pres.pipe(res);
          return;
        }
        const parts: Buffer[] = [];
        pres.on("data", (c: Buffer) => parts.push(c));
        pres.on("end", () => {
          const b = Buffer.concat(parts);
          // Past the gzip header: the member still inflates, to other bytes.
          if (b.length > 64) b[b.length >> 1] = (b[b.length >> 1] as number) ^ 0x55;
          res.writeHead(206, pres.headers).end(b);
        });
      },
    );
    req.pipe(preq);
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  return { host: `127.0.0.1:${port}`, close: () => new Promise((r) => server.close(() => r())) };
}

before(async () => {
  registry = await startRegistry();
  for (const tag of ["esgz", "plain", "plain2", "lying"]) await push(layout.dir, tag, registry.host, `test/${tag}`);
});
after(async () => {
  await registry?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe("eStargz images by range", () => {
  test("the tree from the TOCs is the tree a whole pull unpacks, and each file reads back by range", async () => {
    const proxy = await startProxy(registry.host);
    try {
      const ref = `${proxy.host}/test/esgz:esgz`;
      const lazy = store("lazy");
      const img = await lazy.seekable(ref);
      assert.ok(img, "an image of eStargz layers is seekable");
      const tree = seekableTree(img);
      // No layer was fetched whole: the footer and the TOC of each, by range.
      const blobGets = proxy.requests.filter((r) => r.startsWith("GET ") && r.includes("/blobs/"));
      const layerGets = blobGets.filter((r) => !r.includes(esgz.digest));
      assert.ok(layerGets.length <= 5, `config + 2 per layer, got ${layerGets.length}`);

      const whole = store("whole");
      const pulled = await whole.pull(ref);
      const content = new ContentStore(join(root, "content"));
      await content.init();
      const dest = join(root, "unpacked");
      const r = await whole.unpack(pulled, dest, undefined, { store: content, budget: { room: async () => () => {} } });
      const unpacked = await indexTree(dest, r.keysByIno, tree.index.config);
      assert.ok(unpacked);
      const shape = (es: typeof tree.index.entries) =>
        es
          .map((e) => `${e.p}|${e.t}|${e.m.toString(8)}|${e.u}:${e.g}|${e.s}|${e.l ?? ""}|${e.k ?? ""}`)
          .sort()
          // The root folder's own metadata; the TOC and the landmarks are the format's, not the
          // image's files (a whole unpack writes them, as any eStargz-agnostic runtime does).
          .filter((l) => !l.startsWith("|d|") && !/^(stargz\.index\.json|\.(no\.)?prefetch\.landmark)\|/.test(l));
      assert.deepEqual(shape(tree.index.entries), shape(unpacked.entries));
      assert.deepEqual(tree.index.config, { env: { PATH: "/usr/bin:/bin" }, workdir: "/home/user", user: "user" });
      // What the layer marks to prefetch comes first, less what an upper layer replaced (etc/a.txt).
      const keyOf = (p: string) => tree.index.entries.find((e) => e.p === p)?.k;
      assert.deepEqual(tree.prefetch, [keyOf("bin/tool")]);

      const ranges = lazy.ranges(ref);
      proxy.requests.length = 0;
      for (const [key, run] of Object.entries(tree.runs)) {
        const h = createHash("sha256");
        for await (const c of readRun(ranges, run)) h.update(c);
        assert.equal(h.digest("hex"), metaOfKey(key)?.hex, `content of ${key.slice(0, 12)}`);
      }
      assert.ok(proxy.requests.length > 0);
      assert.ok(
        proxy.requests.every((x) => x.includes("/blobs/")),
        "every file read is a blob range request",
      );
      // The 3 MiB file is four chunks, each its own range.
      assert.equal(tree.runs[keyOf("data/big.bin") as string]?.chunks.length, 4);
    } finally {
      await proxy.close();
    }
  });

  test("a chunk that is not what its TOC says is refused", async () => {
    const proxy = await spoilingProxy(registry.host);
    try {
      const ref = `${registry.host}/test/esgz:esgz`;
      const img = await store("spoiled").seekable(ref);
      assert.ok(img);
      const tree = seekableTree(img);
      const ranges = store("spoiled").ranges(`${proxy.host}/test/esgz:esgz`);
      const key = tree.index.entries.find((e) => e.p === "data/big.bin")?.k as string;
      await assert.rejects(
        (async () => {
          for await (const _ of readRun(ranges, tree.runs[key] as never));
        })(),
        /does not match its TOC digest|incorrect data check|incorrect header|invalid/,
      );
    } finally {
      await proxy.close();
    }
  });

  test("a TOC that is not the one the manifest pins is refused; a plain gzip image is not seekable", async () => {
    await assert.rejects(store("lying").seekable(`${registry.host}/test/lying:lying`), /TOC digest/);
    assert.equal(await store("plain").seekable(`${registry.host}/test/plain:plain`), undefined);
  });

  test("convert-image: a plain image rewritten as eStargz starts lazily, with the tree and bytes of the original", async () => {
    const out = join(root, "converted");
    const c = await convertToEStargz(store("convert"), `${registry.host}/test/plain2:plain2`, out, "v1");
    assert.equal(c.layers.length, 2);
    await push(out, "v1", registry.host, "test/converted");
    const ref = `${registry.host}/test/converted:v1`;
    const img = await store("converted-lazy").seekable(ref);
    assert.ok(img, "every converted layer is eStargz");
    const tree = seekableTree(img);
    // The original, pulled and unpacked whole.
    const whole = store("converted-whole");
    const pulled = await whole.pull(`${registry.host}/test/plain2:plain2`);
    const content = new ContentStore(join(root, "content2"));
    await content.init();
    const dest = join(root, "unpacked2");
    const r = await whole.unpack(pulled, dest, undefined, { store: content, budget: { room: async () => () => {} } });
    const unpacked = await indexTree(dest, r.keysByIno, tree.index.config);
    assert.ok(unpacked);
    const shape = (es: typeof tree.index.entries) =>
      es
        .map((e) => `${e.p}|${e.t}|${e.m.toString(8)}|${e.u}:${e.g}|${e.s}|${e.l ?? ""}|${e.k ?? ""}`)
        .filter((l) => !l.startsWith("|d|"))
        .sort();
    assert.deepEqual(shape(tree.index.entries), shape(unpacked.entries));
    const ranges = store("converted-lazy").ranges(ref);
    for (const [key, run] of Object.entries(tree.runs)) {
      const h = createHash("sha256");
      for await (const chunk of readRun(ranges, run)) h.update(chunk);
      assert.equal(h.digest("hex"), metaOfKey(key)?.hex);
    }
    // Still a plain image to anyone else: a whole pull checks its diff_ids and unpacks it.
    const again = store("converted-plain");
    const p2 = await again.pull(ref);
    await again.unpack(p2, join(root, "unpacked3"));
  });

  test("an entry that climbs out of the tree is not served lazily", () => {
    const img = {
      digest: "sha256:0",
      config: { env: {} },
      layers: [
        {
          digest: "sha256:1",
          size: 100,
          tocOffset: 50,
          toc: { version: 1 as const, entries: [{ name: "../etc/passwd", type: "reg" as const, size: 0 }] },
        },
      ],
    };
    assert.throws(() => seekableTree(img as never), NotSeekable);
  });
});
