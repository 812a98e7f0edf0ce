// After a crash, a lazy template whose rootfs already is the plain tree (the swap ran, its
// record did not yet say so) is taken as settled; one whose rootfs is still the empty mount
// point is not; staging folders a crash left beside the rootfs are removed either way.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { TemplateStore } from "../src/state/template-catalog.js";
import { settledBeforeRestart } from "../src/templates/lazy-settle.js";

const work = mkdtempSync(join(tmpdir(), "aenv-settle-"));
after(() => rmSync(work, { recursive: true, force: true }));

function lazyTemplate(store: TemplateStore, id: string) {
  mkdirSync(join(store.dir, id, "rootfs-r1"), { recursive: true });
  mkdirSync(join(store.dir, id, "rootfs-r1.plain-0a1b2c3d"));
  return store.save({
    id,
    name: id,
    revision: 1,
    rootfsDir: "rootfs-r1",
    user: "root",
    workdir: "/root",
    env: {},
    cpuCount: 1,
    memoryMB: 256,
    diskSizeMB: 512,
    buildId: "on-demand-r1",
    buildStatus: "ready",
    onDemand: true,
    treeIndex: { file: "index-r1.json", sha256: "0".repeat(64) },
    lazy: { digest: `sha256:${"1".repeat(64)}` },
  });
}

test("a plain tree under a lazy record is taken as settled; an empty mount point is not", () => {
  const store = new TemplateStore(work);
  const swapped = lazyTemplate(store, "swapped");
  writeFileSync(join(swapped.rootfs, "id.txt"), "image\n");
  assert.equal(settledBeforeRestart({ templates: store }, swapped), true);
  assert.equal(store.get("swapped")?.lazy, undefined, "its record no longer names it lazy");
  assert.ok(store.get("swapped")?.treeIndex, "its index stays (peers are served from it)");
  assert.equal(existsSync(`${swapped.rootfs}.plain-0a1b2c3d`), false, "the staging folder is gone");

  const mid = lazyTemplate(store, "mid");
  assert.equal(settledBeforeRestart({ templates: store }, mid), false);
  assert.ok(store.get("mid")?.lazy, "still lazy: it is mounted again");
  assert.equal(existsSync(`${mid.rootfs}.plain-0a1b2c3d`), false);
});
