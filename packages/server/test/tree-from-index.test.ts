// A lazy tree settles into a plain tree written from its index and the content store: files
// are hard links to stored entries (a repeated key a copy of its own), metadata as the index
// says, and an index that would write twice to one path, or whose entry disagrees with its
// key, writes nothing the caller keeps. The gate that keeps sandbox starts off a tree's path
// while it is swapped waits for starts in flight and holds new ones back.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { lstatSync, mkdtempSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { ContentStore } from "../src/storage/images/index.js";
import { treeOverheadBytes, writeTreeFromIndex } from "../src/templates/tree-from-index.js";
import type { IndexEntry, TreeIndex } from "../src/templates/tree-index.js";
import { PathGate } from "../src/util/path-gate.js";

const work = mkdtempSync(join(tmpdir(), "aenv-tfi-"));
after(() => rmSync(work, { recursive: true, force: true }));
const uid = process.getuid?.() ?? 0;
const gid = process.getgid?.() ?? 0;
const asRoot = uid === 0;
const MT = 1_700_000_000;

async function* once(b: Buffer) {
  yield b;
}

async function stored(store: ContentStore, bytes: string, mode: number): Promise<string> {
  const hex = createHash("sha256").update(bytes).digest("hex");
  const key = ContentStore.key(hex, { mode, uid, gid, mtime: MT });
  await store.adopt(once(Buffer.from(bytes)), key, bytes.length);
  return key;
}

const dir = (p: string, m = 0o755): IndexEntry => ({ p, t: "d", m, u: uid, g: gid, s: 0, mt: MT - 10 });
const file = (p: string, k: string | undefined, s: number, m = 0o644): IndexEntry => ({
  p,
  t: "f",
  m,
  u: uid,
  g: gid,
  s,
  mt: MT,
  ...(k ? { k } : {}),
});

test("a tree from its index: links into the store, a copy for a repeated key, metadata as listed", async () => {
  const store = new ContentStore(join(work, "files-a"));
  await store.init();
  const tool = await stored(store, "#!/bin/sh\necho hi\n", 0o755);
  const text = await stored(store, "same words\n", 0o644);
  const idx: TreeIndex = {
    v: 1,
    config: { env: {} },
    entries: [
      dir(""),
      dir("usr"),
      dir("usr/bin", 0o750),
      file("usr/bin/tool", tool, 18, 0o755),
      file("usr/a", text, 11),
      file("usr/b", text, 11),
      file("usr/empty", undefined, 0, 0o600),
      { p: "usr/link", t: "l", m: 0o777, u: uid, g: gid, s: 0, mt: MT, l: "bin/tool" },
    ],
  };
  const refetched: string[] = [];
  const dest = join(work, "tree-a");
  await writeTreeFromIndex(
    idx,
    { entryPath: (k) => store.entryPath(k), refetch: async (k) => void refetched.push(k) },
    dest,
    asRoot,
  );
  const st = (p: string) => lstatSync(join(dest, p));
  assert.equal(st("usr/bin/tool").ino, lstatSync(store.entryPath(tool)).ino, "a hard link to the stored entry");
  assert.equal(st("usr/a").ino, lstatSync(store.entryPath(text)).ino);
  assert.notEqual(st("usr/b").ino, st("usr/a").ino, "the tree's second path with that key has its own inode");
  assert.equal(readFileSync(join(dest, "usr/b"), "utf8"), "same words\n");
  assert.equal(st("usr/b").mode & 0o7777, 0o644);
  assert.equal(st("usr/b").mtimeMs, MT * 1000);
  assert.equal(st("usr/empty").size, 0);
  assert.equal(st("usr/empty").mode & 0o7777, 0o600);
  assert.equal(st("usr/bin").mode & 0o7777, 0o750);
  assert.equal(st("usr/bin").mtimeMs, (MT - 10) * 1000, "a folder's mtime survives its children");
  assert.equal(lstatSync(dest).mtimeMs, (MT - 10) * 1000);
  assert.equal(readlinkSync(join(dest, "usr/link")), "bin/tool");
  assert.deepEqual(refetched, []);
  assert.equal(treeOverheadBytes(idx), 3 * 4096 + 4096, "three folders and the copy");
});

test("content a sweep took is fetched again; an index that lists a path twice or lies about a file is refused", async () => {
  const store = new ContentStore(join(work, "files-b"));
  await store.init();
  const key = await stored(store, "payload", 0o644);
  rmSync(store.entryPath(key));
  const refetched: string[] = [];
  const content = {
    entryPath: (k: string) => store.entryPath(k),
    refetch: async (k: string) => {
      refetched.push(k);
      await store.adopt(once(Buffer.from("payload")), k, 7);
    },
  };
  const ok: TreeIndex = { v: 1, config: { env: {} }, entries: [dir(""), file("f", key, 7)] };
  await writeTreeFromIndex(ok, content, join(work, "tree-b"), asRoot);
  assert.deepEqual(refetched, [key]);
  assert.equal(readFileSync(join(work, "tree-b", "f"), "utf8"), "payload");

  // A folder listed again as a link: writing below it would go through the link.
  const twice: TreeIndex = {
    v: 1,
    config: { env: {} },
    entries: [dir(""), dir("etc"), { ...dir("etc"), t: "l", l: "/" }, file("etc/f", key, 7)],
  };
  await assert.rejects(writeTreeFromIndex(twice, content, join(work, "tree-c"), asRoot), /lists etc twice/);
  const otherMode: TreeIndex = { v: 1, config: { env: {} }, entries: [dir(""), file("f", key, 7, 0o4755)] };
  await assert.rejects(writeTreeFromIndex(otherMode, content, join(work, "tree-d"), asRoot), /does not match/);
  const otherSize: TreeIndex = { v: 1, config: { env: {} }, entries: [dir(""), file("f", key, 9)] };
  await assert.rejects(writeTreeFromIndex(otherSize, content, join(work, "tree-e"), asRoot), /not the index's 9/);
});

test("the path gate: a swap waits for starts in flight, and starts wait for the swap", async () => {
  const gate = new PathGate();
  const order: string[] = [];
  let releaseStart = () => {};
  const start = gate.shared("/t/rootfs", async () => {
    order.push("start in");
    await new Promise<void>((r) => {
      releaseStart = r;
    });
    order.push("start out");
  });
  await new Promise((r) => setImmediate(r));
  const swap = gate.exclusive("/t/rootfs", () => {
    order.push("swap");
  });
  const other = gate.shared("/t/other", async () => {
    order.push("other path");
  });
  await other;
  const later = gate.shared("/t/rootfs", async () => {
    order.push("later start");
  });
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(order, ["start in", "other path"], "the swap waits; a later start waits behind it");
  releaseStart();
  await Promise.all([start, swap, later]);
  assert.deepEqual(order, ["start in", "other path", "start out", "swap", "later start"]);
});
