/**
 * Applying a filesystem layer (see capture.ts) to a freshly booted sandbox's `/`: whiteouts
 * remove, entries replace whatever is at their path, with mode, owner and mtime kept.
 * Directory times are set last (writing into a directory changes its mtime). File system
 * calls are synchronous: nothing else runs in the sandbox yet, and a thread-pool hop per call
 * costs more than the call under gVisor.
 */
import {
  chmodSync,
  chownSync,
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  futimesSync,
  lchownSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeSync,
} from "node:fs";
import path from "node:path";
import type { EnvdLayerStats } from "@aenv/protocol";
import { readLayer, WHITEOUT_PREFIX } from "./tar.js";

const RESERVED = ["proc", "sys", "dev", ".aenv"];

/** A layer path as a path under root; undefined for one that must not be written. */
function target(root: string, rel: string): string | undefined {
  const parts = rel.split("/");
  if (!rel || rel.startsWith("/") || parts.some((p) => p === "" || p === "." || p === "..")) return undefined;
  if (RESERVED.includes(parts[0] ?? "")) return undefined;
  return path.join(root, rel);
}

function isDir(p: string): boolean {
  try {
    return lstatSync(p).isDirectory();
  } catch {
    return false;
  }
}

/** Runs create(); if something is in the way, removes it and tries once more. */
function replacing<T>(p: string, create: () => T): T {
  try {
    return create();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "EEXIST" && code !== "EISDIR" && code !== "ENOTDIR") throw err;
    rmSync(p, { recursive: true, force: true });
    return create();
  }
}

function writeAll(fd: number, b: Buffer): void {
  let off = 0;
  while (off < b.length) off += writeSync(fd, b, off, b.length - off);
}

export async function applyLayer(src: AsyncIterable<Buffer>, root = "/"): Promise<EnvdLayerStats> {
  const stats: EnvdLayerStats = { entries: 0, whiteouts: 0, bytes: 0 };
  const dirTimes: Array<{ p: string; mtime: number }> = [];
  const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
  for await (const { header: h, contents } of readLayer(src)) {
    const base = path.posix.basename(h.path);
    if (base.startsWith(WHITEOUT_PREFIX)) {
      const p = target(root, path.posix.join(path.posix.dirname(h.path), base.slice(WHITEOUT_PREFIX.length)));
      if (p) rmSync(p, { recursive: true, force: true });
      stats.whiteouts++;
      continue;
    }
    const p = target(root, h.path);
    if (!p) continue;
    stats.entries++;
    if (h.type === "dir") {
      if (!isDir(p)) replacing(p, () => mkdirSync(p));
      chownSync(p, h.uid, h.gid);
      chmodSync(p, h.mode);
      dirTimes.push({ p, mtime: h.mtime });
    } else if (h.type === "file") {
      const fd = replacing(p, () => openSync(p, CREATE, 0o600));
      try {
        for await (const chunk of contents()) writeAll(fd, chunk);
        // Owner before mode: chown clears set-user-ID bits.
        fchownSync(fd, h.uid, h.gid);
        fchmodSync(fd, h.mode);
        futimesSync(fd, h.mtime, h.mtime);
      } finally {
        closeSync(fd);
      }
      stats.bytes += h.size;
    } else if (h.type === "symlink") {
      replacing(p, () => symlinkSync(h.linkname, p));
      lchownSync(p, h.uid, h.gid);
      lutimesSync(p, h.mtime, h.mtime);
    } else {
      const first = target(root, h.linkname);
      if (first) replacing(p, () => linkSync(first, p));
    }
  }
  for (const { p, mtime } of dirTimes.reverse()) utimesSync(p, mtime, mtime);
  return stats;
}
