/**
 * File metadata: the `user.e2b.*` extended attributes of each file, as the reference envd
 * keeps it, so metadata set out of band (`os.setxattr`) shows in getInfo and metadata set
 * through envd is visible to tools in the sandbox. Node has no xattr API, so a static helper
 * (init/aenv-xattr.c, in the runtime folder) reads and writes them: one long-lived helper
 * process, one call per request or per listed directory. Where a filesystem refuses user xattrs (or outside a sandbox, where
 * the helper is absent) metadata falls back to memory bound to the file's (dev, ino).
 */
import { promises as fsp } from "node:fs";
import path from "node:path";
import { XattrHelper, XattrHelperGone } from "./xattr-helper.js";

export type FileMeta = Record<string, string>;

export interface MetadataStore {
  /** The metadata of each path (undefined: none), in order. */
  getMany(files: Array<{ path: string; dev: number; ino: number }>): Promise<Array<FileMeta | undefined>>;
  set(file: string, meta: FileMeta): Promise<void>;
  /** After a rename of `from` (file or directory) to `to`. */
  move(from: string, to: string): void;
  /** After removing `p` (file or directory tree). */
  remove(p: string): void;
}

interface Record_ {
  dev: number;
  ino: number;
  meta: Record<string, string>;
}

/** Metadata in envd's memory: lost when envd restarts (kept by memory snapshots). */
export class MemoryMetadata implements MetadataStore {
  private readonly byPath = new Map<string, Record_>();

  async getMany(files: Array<{ path: string; dev: number; ino: number }>): Promise<Array<FileMeta | undefined>> {
    return files.map((f) => this.get(f.path, f));
  }

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
  has(file: string): boolean {
    return this.byPath.has(path.resolve(file));
  }

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

  remove(p: string): void {
    const abs = path.resolve(p);
    for (const k of [...this.byPath.keys()]) {
      if (k === abs || k.startsWith(`${abs}/`)) this.byPath.delete(k);
    }
  }
}

const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");
const unhex = (h: string) => Buffer.from(h, "hex").toString("utf8");
/** Paths per helper call (argv stays far below the kernel's limit). */
const BATCH = 256;

/** Metadata in the files' own `user.e2b.*` xattrs, through the aenv-xattr helper. */
export class XattrMetadata implements MetadataStore {
  /** Files whose filesystem refused xattrs. */
  private readonly fallback = new MemoryMetadata();
  private helper: XattrHelper | undefined;

  /** The helper starts now: in a sandbox, before the template's image is taken, so every copy has it. */
  constructor(private readonly tool: string) {
    this.helper = new XattrHelper(tool);
  }

  async getMany(files: Array<{ path: string; dev: number; ino: number }>): Promise<Array<FileMeta | undefined>> {
    const out: Array<FileMeta | undefined> = await this.fallback.getMany(files);
    for (let start = 0; start < files.length; start += BATCH) {
      const batch = files.slice(start, start + BATCH);
      const text = await this.run(["get", ...batch.map((f) => path.resolve(f.path))]).catch(() => "");
      for (const line of text.split("\n")) {
        const [i, k, v] = line.split("\t");
        if (i === undefined || k === undefined || v === undefined) continue;
        const at = start + Number(i);
        if (out[at] && this.fallback.has(files[at]?.path ?? "")) continue;
        out[at] = { ...(out[at] ?? {}), [unhex(k)]: unhex(v) };
      }
    }
    return out;
  }

  async set(file: string, meta: FileMeta): Promise<void> {
    const args = ["set", path.resolve(file), ...Object.entries(meta).flatMap(([k, v]) => [hex(k), hex(v)])];
    try {
      await this.run(args);
      await this.fallback.set(file, {});
    } catch {
      // e.g. a mount without user xattrs: kept in memory instead
      await this.fallback.set(file, meta);
    }
  }

  move(from: string, to: string): void {
    this.fallback.move(from, to);
  }

  remove(p: string): void {
    this.fallback.remove(p);
  }

  /** One call in the helper; a helper that died (killed from inside the sandbox) is replaced once. */
  private async run(args: string[]): Promise<string> {
    for (let attempt = 0; ; attempt++) {
      if (!this.helper || this.helper.dead) this.helper = new XattrHelper(this.tool);
      try {
        return await this.helper.call(args);
      } catch (err) {
        if (!(err instanceof XattrHelperGone) || attempt > 0) throw err;
      }
    }
  }

  close(): void {
    this.helper?.close();
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
