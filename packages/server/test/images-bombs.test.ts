/**
 * Layers that are small as stored and huge unpacked: whoever writes a registry the server pulls
 * from (an API caller names it) can make a few KiB of gzip or zstd expand to any size, and the
 * config's diff_ids say whatever the layer really holds. The size limit of a pull counts
 * compressed bytes, so unpacking has bounds of its own.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { type ImagePullError, ImageStore } from "../src/storage/images/index.js";
import { type Compression, makeTar, OciLayout, type TarSpec } from "./helpers/registry.js";

const root = mkdtempSync("/var/tmp/aenv-images-bombs-");
after(() => rmSync(root, { recursive: true, force: true }));
const layout = new OciLayout(join(root, "layout"));
const MiB = 1024 * 1024;

function imageOf(tag: string, compression: Compression, ...layers: TarSpec[][]): void {
  layout.tag(layout.image({ layers: layers.map((l) => ({ tar: makeTar(l), compression })) }), tag);
}

async function refused(store: ImageStore, tag: string, code: string, re: RegExp): Promise<void> {
  const img = await store.pull(`oci:${layout.dir}:${tag}`);
  const parent = join(root, "roots", tag);
  mkdirSync(parent, { recursive: true });
  await assert.rejects(store.unpack(img, join(parent, "rootfs")), (e: ImagePullError) => {
    assert.equal(e.code, code, e.message);
    assert.match(e.message, re);
    return true;
  });
  assert.deepEqual(readdirSync(parent), [], "no half-made rootfs or temp dir left");
}

describe("decompression bombs and huge layers", () => {
  const store = new ImageStore({
    dir: join(root, "store"),
    authFile: join(root, "none.json"),
    maxUnpackedBytes: 16 * MiB,
    maxUnpackedEntries: 1000,
  });
  const zeros = Buffer.alloc(24 * MiB);

  for (const c of ["gzip", "zstd"] as const) {
    test(`a ${c} layer expanding past the unpacked limit is refused as too-large`, async () => {
      imageOf(`bomb-${c}`, c, [{ name: "zeros", content: zeros }]);
      await refused(store, `bomb-${c}`, "too-large", /unpacks to more than 16777216 bytes/);
    });
  }

  test("the limit counts every layer of the image, not each alone", async () => {
    const half = Buffer.alloc(10 * MiB);
    imageOf("bomb-split", "gzip", [{ name: "a", content: half }], [{ name: "b", content: half }]);
    await refused(store, "bomb-split", "too-large", /unpacks to more than 16777216 bytes/);
  });

  test("more entries than the limit (empty files) are refused as too-large", async () => {
    const many = Array.from({ length: 1200 }, (_, i) => ({ name: `f${i}`, content: "" }));
    imageOf("many", "gzip", many);
    await refused(store, "many", "too-large", /more than 1000 entries/);
  });

  test("within the limits an image unpacks", async () => {
    imageOf("fine", "gzip", [{ name: "small", content: Buffer.alloc(MiB) }]);
    const img = await store.pull(`oci:${layout.dir}:fine`);
    const dest = join(root, "ok", "fine");
    await store.unpack(img, dest);
    assert.ok(existsSync(join(dest, "small")));
  });

  test("a path longer than PATH_MAX is a bad-layer error, not a crash", async () => {
    const deep = `${"d/".repeat(3000)}f`;
    imageOf("deep", "gzip", [{ name: deep, content: "x" }]);
    await refused(store, "deep", "bad-layer", /longer than 4096 bytes/);
  });
});
