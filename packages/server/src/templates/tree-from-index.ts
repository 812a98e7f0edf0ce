import { constants } from "node:fs";
import { chmod, chown, copyFile, lchown, link, lstat, lutimes, mkdir, open, symlink, utimes } from "node:fs/promises";
import { join } from "node:path";
import { metaOfKey } from "../storage/images/index.js";
import type { IndexEntry, TreeIndex } from "./tree-index.js";

/** What writing a tree from its index needs of the content store. */
export interface TreeContent {
  entryPath(key: string): string;
  /** Brings content `key` into the store again (a sweep may have taken it meanwhile). */
  refetch(key: string): Promise<void>;
}

/** Bytes a tree written from `idx` adds beside its content: folders, and the files that get a copy. */
export function treeOverheadBytes(idx: TreeIndex): number {
  const linked = new Set<string>();
  let bytes = 0;
  for (const e of idx.entries) {
    if (e.t === "d") bytes += 4096;
    else if (e.k) {
      if (linked.has(e.k)) bytes += Math.ceil(e.s / 4096) * 4096;
      linked.add(e.k);
    }
  }
  return bytes;
}

/**
 * Writes the tree an index describes at `dest` (which must not exist) from the content store,
 * as an unpack through the store would have: each file a hard link to its stored entry, a
 * second path with a key the tree already links a copy of its own, owners, modes and mtimes
 * as the index says. The index may come from a peer or a registry's TOCs: every path is
 * created exclusively, a path listed twice is refused, and a parent is always a folder this
 * call made, so nothing is written through a link.
 */
export async function writeTreeFromIndex(
  idx: TreeIndex,
  content: TreeContent,
  dest: string,
  asRoot: boolean,
): Promise<void> {
  const seen = new Set<string>();
  const linked = new Set<string>();
  const dirs: IndexEntry[] = [];
  for (const e of idx.entries) {
    if (seen.has(e.p)) throw new Error(`index lists ${e.p || "/"} twice`);
    seen.add(e.p);
    const p = e.p ? join(dest, e.p) : dest;
    if (e.t === "d") {
      await mkdir(p, { mode: 0o700 });
      dirs.push(e);
    } else if (e.t === "l") {
      await symlink(e.l ?? "", p);
      if (asRoot) await lchown(p, e.u, e.g);
      await lutimes(p, e.mt, e.mt);
    } else {
      if (e.k) checkKeyMeta(e);
      if (e.k && !linked.has(e.k)) {
        linked.add(e.k);
        if (await linkEntry(content, e.k, p, e.s)) continue;
      } else if (e.k) await copyFile(content.entryPath(e.k), p, constants.COPYFILE_EXCL);
      else await (await open(p, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600)).close();
      if (asRoot) await chown(p, e.u, e.g);
      await chmod(p, e.m); // after chown, which clears setuid bits
      await utimes(p, e.mt, e.mt);
    }
  }
  // Folders last, children before parents: writing into a folder moves its mtime.
  for (const e of dirs.reverse()) {
    const p = e.p ? join(dest, e.p) : dest;
    if (asRoot) await chown(p, e.u, e.g);
    await chmod(p, e.m);
    await utimes(p, e.mt, e.mt);
  }
}

/** A stored entry carries its metadata in its key: it must be what the index says of the path. */
function checkKeyMeta(e: IndexEntry): void {
  const m = metaOfKey(e.k ?? "");
  if (!m || m.mode !== e.m || m.uid !== e.u || m.gid !== e.g || m.mtime !== e.mt) {
    throw new Error(`index entry ${e.p} does not match its content key`);
  }
}

/**
 * A hard link to the stored entry (fetched again if a sweep took it); false when the
 * filesystem's link limit made it a copy, whose metadata is the caller's to set.
 */
async function linkEntry(content: TreeContent, key: string, p: string, size: number): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    try {
      await link(content.entryPath(key), p);
      break;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT" && attempt === 0) {
        await content.refetch(key);
        continue;
      }
      if (code !== "EMLINK") throw err;
      await copyFile(content.entryPath(key), p, constants.COPYFILE_EXCL);
      return false;
    }
  }
  // The key proves the bytes, not the size the index gave them (what the mount reported).
  if ((await lstat(p)).size !== size)
    throw new Error(`content of ${key.slice(0, 12)} is not the index's ${size} bytes`);
  return true;
}
