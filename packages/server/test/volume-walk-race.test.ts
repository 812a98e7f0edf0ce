/**
 * Walks of whole trees that a sandbox can change while they run: the local volume backend's
 * size walk and removal, the catalog's removal of a volume folder, and the descriptor walk
 * beneath them (util/beneath.ts walkTree and removeTree); and the posix_fs backend's
 * writability probe. Races are driven deterministically through seams that run at the moment
 * a path-string implementation is open to them; nothing outside the tree may be read,
 * counted, written or removed, and no walk may hold a descriptor per level.
 */
import assert from "node:assert/strict";
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, beforeEach, describe, test } from "node:test";
import pino from "pino";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import { VolumeCatalog } from "../src/storage/volumes/catalog.js";
import { LocalDirBackend } from "../src/storage/volumes/local-dir.js";
import { type Dir, removePath, walkTree, withDir } from "../src/util/beneath.js";

const base = mkdtempSync(join(tmpdir(), "aenv-walk-"));
// removePath, not rmSync: Node's recursive rm overflows its stack on the deepest trees here.
after(() => removePath(base));

const HOST_BYTES = 1 << 20;
let dir: string;
let host: string;
let n = 0;
beforeEach(() => {
  dir = join(base, String(n++));
  host = join(dir, "host");
  mkdirSync(host, { recursive: true });
  writeFileSync(join(host, "keep"), Buffer.alloc(HOST_BYTES));
});

function assertHostUntouched(): void {
  assert.deepEqual(readdirSync(host), ["keep"]);
  assert.equal(statSync(join(host, "keep")).size, HOST_BYTES);
}

/** What a sandbox does: the folder `path` becomes a link to the host folder. */
function swapForLink(path: string): void {
  renameSync(path, `${path}.moved`);
  symlinkSync(host, path);
}

/** A chain `d/d/d/...` `depth` deep under `root`, a 1-byte file at each level (built by descriptor: its path outgrows PATH_MAX). */
function deepTree(root: string, depth: number): void {
  const flags = constants.O_RDONLY | constants.O_DIRECTORY;
  mkdirSync(root, { recursive: true });
  let fd = openSync(root, flags);
  for (let i = 0; i < depth; i++) {
    writeFileSync(`/proc/self/fd/${fd}/f`, "x");
    mkdirSync(`/proc/self/fd/${fd}/d`);
    const next = openSync(`/proc/self/fd/${fd}/d`, flags);
    closeSync(fd);
    fd = next;
  }
  closeSync(fd);
}

const openFds = () => readdirSync("/proc/self/fd").length;
const MAX = 1 << 30;

describe("local volume backend", () => {
  const volumes = () => join(dir, "volumes");
  const backend = (found?: (rel: string) => void) =>
    new LocalDirBackend((id) => join(volumes(), id), MAX, found ? { found } : {});

  test("free(): a folder swapped for a link once the walk found it counts nothing of the host", async () => {
    const b = backend((rel) => {
      if (rel === "/d") swapForLink(join(b.root("v"), "d"));
    });
    await b.create("v");
    mkdirSync(join(b.root("v"), "d"));
    writeFileSync(join(b.root("v"), "d", "own"), Buffer.alloc(100));
    writeFileSync(join(b.root("v"), "top"), Buffer.alloc(10));
    // The swapped-out folder is not walked either (it is no longer where the walk found it).
    assert.equal(await b.free("v"), MAX - 10);
    assertHostUntouched();
  });

  test("free(): planted links count 0; files at every level of a deep tree count", async () => {
    const b = backend();
    await b.create("v");
    symlinkSync(host, join(b.root("v"), "to-host"));
    symlinkSync(join(host, "keep"), join(b.root("v"), "to-file"));
    deepTree(join(b.root("v"), "deep"), 300);
    const before = openFds();
    assert.equal(await b.free("v"), MAX - 300);
    assert.equal(openFds(), before, "a descriptor left open");
    assert.equal(await backend().free("never-created"), MAX);
  });

  test("remove(): planted links are unlinked, not followed; deep trees go too", async () => {
    const b = backend();
    await b.create("v");
    symlinkSync(host, join(b.root("v"), "to-host"));
    mkdirSync(join(b.root("v"), "sub"));
    symlinkSync(host, join(b.root("v"), "sub", "to-host"));
    deepTree(join(b.root("v"), "deep"), 300);
    await b.remove("v");
    assert.deepEqual(readdirSync(volumes()), []);
    assertHostUntouched();
  });

  test("the catalog's destroy and load remove volume folders by descriptor", async () => {
    const b = backend();
    const log = pino({ level: "silent" });
    const cat = new VolumeCatalog(volumes(), (id) => join(volumes(), id), b, log);
    await cat.load();
    const { id } = await cat.create("a", undefined);
    symlinkSync(host, join(b.root(id), "to-host"));
    mkdirSync(join(b.root(id), "sub"));
    symlinkSync(host, join(b.root(id), "sub", "to-host"));
    await cat.destroy(id);
    assert.ok(!existsSync(join(volumes(), id)));
    assert.ok(!existsSync(join(volumes(), `${id}.deleting`)));
    // A half-deleted volume left by a crash, links in it: gone at the next load.
    mkdirSync(join(volumes(), "x.deleting", "data"), { recursive: true });
    symlinkSync(host, join(volumes(), "x.deleting", "data", "to-host"));
    await new VolumeCatalog(volumes(), (vid) => join(volumes(), vid), b, log).load();
    assert.ok(!existsSync(join(volumes(), "x.deleting")));
    assertHostUntouched();
  });
});

describe("walkTree and removeTree", () => {
  test("a walk of a 500-deep tree holds at most two descriptors below its top", async () => {
    const root = join(dir, "root");
    deepTree(root, 500);
    const before = openFds();
    let most = 0;
    let folders = 0;
    await withDir(root, [], (top) =>
      walkTree(top, {
        enter: async (d: Dir) => {
          folders++;
          most = Math.max(most, openFds() - before);
          return readdirSync(d.self).filter((e) => e === "d");
        },
      }),
    );
    assert.equal(folders, 501);
    // The top's own descriptor, the folder the walk is in, and one for the step up or down.
    assert.ok(most <= 3, `${most} descriptors open`);
    assert.equal(openFds(), before);
  });

  test("concurrent removals of trees over 1,024 deep all finish and leave no descriptor open", async () => {
    const roots = [0, 1].map((i) => join(dir, `r${i}`));
    for (const r of roots) deepTree(r, 1030);
    const before = openFds();
    await Promise.all(roots.map((r) => removePath(r)));
    for (const r of roots) assert.ok(!existsSync(r));
    assert.equal(openFds(), before);
  });

  test("a folder moved out from under the walk: it climbs back to its own parent, never past the top", async () => {
    const root = join(dir, "root");
    mkdirSync(join(root, "a", "b", "c"), { recursive: true });
    const outside = statSync(dir).ino;
    const seen: number[] = [];
    await withDir(root, [], (top) =>
      walkTree(top, {
        enter: async (d) => {
          seen.push((await d.stat()).ino);
          // A racer moves the folder the walk is in outside the top: its `..` is now `dir`.
          if (d.rel === "/a/b") renameSync(join(root, "a", "b"), join(dir, "escaped"));
          return readdirSync(d.self);
        },
        leave: async (parent) => {
          seen.push((await parent.stat()).ino);
        },
      }),
    );
    assert.ok(!seen.includes(outside), "the walk reached the folder above its top");
    assert.ok(existsSync(join(dir, "escaped", "c")));
  });
});

describe("posix_fs check()", () => {
  test("a link planted under the probe's name fails the check and writes nothing through it", async () => {
    const root = join(dir, "repo");
    const b = new PosixFsBackend(root, {
      resolved: (name) => symlinkSync(join(host, "keep"), join(root, name)),
    });
    await assert.rejects(b.check(), /not writable/);
    assert.equal(readFileSync(join(host, "keep")).length, HOST_BYTES);
    assertHostUntouched();
  });

  test("a writable root passes and keeps no probe file", async () => {
    const root = join(dir, "repo");
    await new PosixFsBackend(root).check();
    assert.deepEqual(readdirSync(root), []);
  });
});
