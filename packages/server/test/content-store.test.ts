// Unpacking through the content store: files with the same bytes and metadata are one inode
// across trees, a tree keeps its own hard-link structure, the disk budget is asked before a
// write and told what it cost, and entries no tree links are swept.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { ContentStore, type DiskBudget } from "../src/storage/images/index.js";
import { readTar } from "../src/storage/images/tar.js";
import { RootfsWriter } from "../src/storage/images/unpack.js";
import { makeTar, type TarSpec } from "./helpers/registry.js";

const work = mkdtempSync(join(tmpdir(), "aenv-cas-"));
after(() => rmSync(work, { recursive: true, force: true }));

async function* once(b: Buffer) {
  yield b;
}

/** A budget that records what it was asked and told, refusing past `max`. */
function budget(max = Number.POSITIVE_INFINITY) {
  const calls = { asked: 0, added: 0 };
  const b: DiskBudget = {
    async room(bytes) {
      if (calls.added + bytes > max) throw new Error("no room");
      calls.asked += bytes;
      return (added) => {
        calls.added += added;
      };
    },
  };
  return { b, calls };
}

async function unpackInto(dir: string, entries: TarSpec[], store: ContentStore, b: DiskBudget) {
  mkdirSync(dir);
  const w = new RootfsWriter(dir, () => {}, { store, budget: b });
  await w.applyLayer(readTar(once(makeTar(entries))));
  await w.finish();
  return w.stats;
}

const base: TarSpec[] = [
  { name: "usr/", type: "dir" },
  { name: "usr/lib/", type: "dir" },
  { name: "usr/lib/big.so", content: Buffer.alloc(64 * 1024, 7), mode: 0o755 },
  { name: "usr/lib/license-a", content: "same words\n" },
  { name: "usr/lib/license-b", content: "same words\n" },
  { name: "usr/lib/empty", content: "" },
];

test("two images sharing a base hold its files once; a tree's own paths stay apart", async () => {
  const store = new ContentStore(join(work, "files"));
  await store.init();
  const one = budget();
  const s1 = await unpackInto(join(work, "a"), base, store, one.b);
  assert.equal(s1.sharedFiles, 0);
  assert.ok(one.calls.added >= 64 * 1024, "the first tree's bytes are new");
  const two = budget();
  const s2 = await unpackInto(
    join(work, "b"),
    [...base, { name: "usr/lib/own", content: "image b only\n" }],
    store,
    two.b,
  );
  assert.equal(s2.sharedFiles, 2, "big.so and the first license are linked");
  // Its own file, the second license (the same key twice in one tree is a copy), two folders.
  assert.equal(two.calls.added, 4 * 4096);
  const ino = (p: string) => statSync(join(work, p)).ino;
  assert.equal(ino("a/usr/lib/big.so"), ino("b/usr/lib/big.so"), "one inode, one copy in the page cache");
  assert.notEqual(ino("a/usr/lib/license-a"), ino("a/usr/lib/license-b"), "a tree's paths are not linked together");
  assert.equal(statSync(join(work, "a/usr/lib/big.so")).mode & 0o7777, 0o755);
  assert.equal(readFileSync(join(work, "b/usr/lib/own"), "utf8"), "image b only\n");
});

test("the same bytes with another mode are another entry", async () => {
  const store = new ContentStore(join(work, "files"));
  const b = budget();
  const s = await unpackInto(
    join(work, "c"),
    [{ name: "big.so", content: Buffer.alloc(64 * 1024, 7), mode: 0o644 }],
    store,
    b.b,
  );
  assert.equal(s.sharedFiles, 0);
  assert.equal(statSync(join(work, "c/big.so")).mode & 0o7777, 0o644);
});

test("a budget that has no room stops the unpack before the file is written", async () => {
  const store = new ContentStore(join(work, "files"));
  const b = budget(1000);
  await assert.rejects(
    unpackInto(join(work, "d"), [{ name: "huge", content: Buffer.alloc(8192, 1) }], store, b.b),
    /no room/,
  );
  assert.throws(() => statSync(join(work, "d/huge")));
});

test("sweep removes entries no tree links, and only those", async () => {
  const store = new ContentStore(join(work, "files"));
  const before = await store.usage();
  rmSync(join(work, "a"), { recursive: true });
  const swept = await store.sweep();
  assert.equal(swept.entries, 0, "tree b still links the shared entries");
  rmSync(join(work, "b"), { recursive: true });
  rmSync(join(work, "c"), { recursive: true });
  const swept2 = await store.sweep();
  assert.equal(swept2.entries, before.entries);
  assert.equal((await store.usage()).entries, 0);
});
