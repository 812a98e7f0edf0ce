/**
 * File metadata (the `user.e2b.*` xattrs of the reference envd).
 *
 * Node has no xattr API and we ship no native module for it, so metadata lives in
 * memory, keyed by absolute path and bound to the file's (dev, ino): if the file
 * is replaced by something else at the same path (a new inode), its metadata is gone,
 * the way an xattr would be. Move/Remove carry or drop entries. Lost when envd restarts
 * (it survives memory snapshots, because it is process memory).
 */
import { promises as fsp } from "node:fs";
import path from "node:path";

interface Record_ {
  dev: number;
  ino: number;
  meta: Record<string, string>;
}

export class MetadataStore {
  private readonly byPath = new Map<string, Record_>();

  async set(file: string, meta: Record<string, string>): Promise<void> {
    const abs = path.resolve(file);
    if (Object.keys(meta).length === 0) {
      this.byPath.delete(abs);
      return;
    }
    const st = await fsp.lstat(abs);
    this.byPath.set(abs, { dev: st.dev, ino: st.ino, meta: { ...meta } });
  }

  /** Metadata of `file` given its lstat result; stale entries are dropped. */
  get(file: string, st: { dev: number; ino: number }): Record<string, string> | undefined {
    const abs = path.resolve(file);
    const rec = this.byPath.get(abs);
    if (!rec) return undefined;
    if (rec.dev !== st.dev || rec.ino !== st.ino) {
      this.byPath.delete(abs);
      return undefined;
    }
    return rec.meta;
  }

  /** After a rename of `from` (file or directory) to `to`. */
  move(from: string, to: string): void {
    const src = path.resolve(from);
    const dst = path.resolve(to);
    this.remove(dst);
    for (const [k, v] of [...this.byPath]) {
      if (k === src || k.startsWith(`${src}/`)) {
        this.byPath.delete(k);
        this.byPath.set(dst + k.slice(src.length), v);
      }
    }
  }

  /** After removing `p` (file or directory tree). */
  remove(p: string): void {
    const abs = path.resolve(p);
    for (const k of [...this.byPath.keys()]) {
      if (k === abs || k.startsWith(`${abs}/`)) this.byPath.delete(k);
    }
  }
}

/** Validate X-Metadata-* headers: printable ASCII, keys ≤ 246 bytes, ≤ 4096 bytes in total. */
export function metadataFromHeaders(
  headers: Record<string, string | string[] | undefined>,
): { ok: true; meta: Record<string, string> } | { ok: false; message: string } {
  const meta: Record<string, string> = {};
  let total = 0;
  const printable = /^[\x20-\x7e]*$/;
  for (const [name, raw] of Object.entries(headers)) {
    const lower = name.toLowerCase();
    if (!lower.startsWith("x-metadata-")) continue;
    const key = lower.slice("x-metadata-".length);
    const value = Array.isArray(raw) ? raw.join(", ") : (raw ?? "");
    if (!key) return { ok: false, message: "metadata key must not be empty" };
    if (!printable.test(key) || !printable.test(value)) {
      return { ok: false, message: `metadata '${key}' must be printable ASCII` };
    }
    if (key.length > 246) return { ok: false, message: `metadata key '${key.slice(0, 32)}…' is too long` };
    total += key.length + value.length;
    meta[key] = value;
  }
  if (total > 4096) return { ok: false, message: "metadata is too large (4096 bytes max)" };
  return { ok: true, meta };
}
