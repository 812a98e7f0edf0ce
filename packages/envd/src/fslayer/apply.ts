/**
 * Applying a filesystem layer (see capture.ts) to a freshly booted sandbox's `/`: whiteouts
 * remove, entries replace whatever is at their path, with mode, owner and mtime kept.
 * Directory times are set last (writing into a directory changes its mtime).
 */
import { createWriteStream } from "node:fs";
import { chmod, chown, lchown, link, lstat, lutimes, mkdir, rm, symlink, utimes } from "node:fs/promises";
import path from "node:path";
import { pipeline } from "node:stream/promises";
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

async function isDir(p: string): Promise<boolean> {
  try {
    return (await lstat(p)).isDirectory();
  } catch {
    return false;
  }
}

export async function applyLayer(src: AsyncIterable<Buffer>, root = "/"): Promise<EnvdLayerStats> {
  const stats: EnvdLayerStats = { entries: 0, whiteouts: 0, bytes: 0 };
  const dirTimes: Array<{ p: string; mtime: number }> = [];
  for await (const { header: h, contents } of readLayer(src)) {
    const base = path.posix.basename(h.path);
    if (base.startsWith(WHITEOUT_PREFIX)) {
      const p = target(root, path.posix.join(path.posix.dirname(h.path), base.slice(WHITEOUT_PREFIX.length)));
      if (p) await rm(p, { recursive: true, force: true });
      stats.whiteouts++;
      continue;
    }
    const p = target(root, h.path);
    if (!p) continue;
    stats.entries++;
    if (h.type === "dir") {
      if (!(await isDir(p))) {
        await rm(p, { recursive: true, force: true });
        await mkdir(p);
      }
      await chown(p, h.uid, h.gid);
      await chmod(p, h.mode);
      dirTimes.push({ p, mtime: h.mtime });
      continue;
    }
    await rm(p, { recursive: true, force: true });
    if (h.type === "file") {
      // Owner before mode: chown clears set-user-ID bits.
      await pipeline(contents(), createWriteStream(p, { flags: "wx", mode: 0o600 }));
      await chown(p, h.uid, h.gid);
      await chmod(p, h.mode);
      await utimes(p, h.mtime, h.mtime);
      stats.bytes += h.size;
    } else if (h.type === "symlink") {
      await symlink(h.linkname, p);
      await lchown(p, h.uid, h.gid);
      await lutimes(p, h.mtime, h.mtime);
    } else {
      const first = target(root, h.linkname);
      if (first) await link(first, p);
    }
  }
  for (const { p, mtime } of dirTimes.reverse()) await utimes(p, mtime, mtime);
  return stats;
}
