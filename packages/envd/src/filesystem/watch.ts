/**
 * Directory watching on top of fs.watch (inotify), one watcher per directory so that
 * recursion, renames and names relative to the root are under our control.
 *
 * fs.watch only reports "rename" and "change"; we classify them with lstat and a cache
 * of what we have seen: rename + exists → CREATE; rename + gone → RENAME when the same
 * inode shows up in the same batch of events, else REMOVE; change → CHMOD when only the
 * mode changed, else WRITE.
 */
import { type FSWatcher, promises as fsp, type Stats, watch } from "node:fs";
import path from "node:path";
import { filesystemPb } from "@aenv/protocol";
import { log } from "../log.js";
import { targetOfTemp } from "../tempname.js";
import type { UserDb } from "../users.js";
import { entryFromStat } from "./entry.js";
import type { MetadataStore } from "./metadata.js";

export interface WatchOptions {
  recursive: boolean;
  includeEntry: boolean;
}

export interface WatchEvent {
  name: string;
  type: filesystemPb.EventType;
  entry?: filesystemPb.EntryInfo;
}

interface Known {
  ino: number;
  mode: number;
  mtimeMs: number;
  size: number;
  isDir: boolean;
}

interface Raw {
  dir: string;
  kind: "rename" | "change";
  name: string;
}

const MAX_WATCHED_DIRS = 8192;

function known(st: Stats): Known {
  return { ino: st.ino, mode: st.mode, mtimeMs: st.mtimeMs, size: st.size, isDir: st.isDirectory() };
}

async function lstatOrUndefined(p: string): Promise<Stats | undefined> {
  try {
    return await fsp.lstat(p);
  } catch {
    return undefined;
  }
}

export class DirWatcher {
  private readonly watchers = new Map<string, FSWatcher>();
  private readonly cache = new Map<string, Known>();
  private readonly raw: Raw[] = [];
  /** Targets of envd uploads in flight (temp file seen), so their commit reads as a write. */
  private readonly uploads = new Map<string, number>();
  private processing = false;
  private closed = false;

  constructor(
    readonly root: string,
    private readonly opts: WatchOptions,
    private readonly deps: { users: UserDb; metadata: MetadataStore },
    private readonly onEvent: (ev: WatchEvent) => void,
  ) {}

  async start(): Promise<void> {
    await this.addDir(this.root, true);
  }

  close(): void {
    this.closed = true;
    for (const w of this.watchers.values()) {
      try {
        w.close();
      } catch {
        // already closed
      }
    }
    this.watchers.clear();
    this.cache.clear();
  }

  /** Watch `dir` (and, when recursive, its subdirectories); remember what it contains. */
  /**
   * With `announce` (a directory that appeared while watching), entries already inside it
   * when its watch starts are reported as created: they were made before inotify could see them.
   */
  private async addDir(dir: string, isRoot = false, announce = false): Promise<void> {
    if (this.closed || this.watchers.has(dir)) return;
    if (this.watchers.size >= MAX_WATCHED_DIRS) {
      log("warn", "watch limit reached", { dir });
      return;
    }
    let w: FSWatcher;
    try {
      w = watch(dir, { persistent: false }, (kind, name) => {
        if (name == null) return;
        this.raw.push({ dir, kind: kind === "change" ? "change" : "rename", name: name.toString() });
        this.schedule();
      });
    } catch (err) {
      if (isRoot) throw err;
      log("debug", "cannot watch directory", { dir, err });
      return;
    }
    w.on("error", (err) => {
      log("debug", "watcher error", { dir, err });
      this.dropDir(dir);
    });
    this.watchers.set(dir, w);
    let names: string[] = [];
    try {
      names = await fsp.readdir(dir);
    } catch {
      return;
    }
    for (const n of names) {
      const full = path.join(dir, n);
      const st = await lstatOrUndefined(full);
      if (!st || this.closed) continue;
      const seen = this.cache.has(full);
      this.cache.set(full, known(st));
      if (announce && !seen) await this.emit(full, filesystemPb.EventType.CREATE, st);
      if (this.opts.recursive && st.isDirectory()) await this.addDir(full, false, announce);
    }
  }

  /** Stop watching `dir` and everything below it. */
  private dropDir(dir: string): void {
    for (const [d, w] of [...this.watchers]) {
      if (d === dir || d.startsWith(`${dir}/`)) {
        try {
          w.close();
        } catch {
          // ignore
        }
        this.watchers.delete(d);
      }
    }
    for (const k of [...this.cache.keys()]) if (k.startsWith(`${dir}/`)) this.cache.delete(k);
  }

  private schedule(): void {
    if (this.processing) return;
    this.processing = true;
    // Let the whole inotify batch arrive (MOVED_FROM + MOVED_TO come together).
    setImmediate(() => {
      this.process()
        .catch((err) => log("warn", "watch processing failed", { err }))
        .finally(() => {
          this.processing = false;
          if (this.raw.length > 0 && !this.closed) this.schedule();
        });
    });
  }

  private async process(): Promise<void> {
    while (this.raw.length > 0 && !this.closed) {
      const ev = this.raw.shift() as Raw;
      const full = path.join(ev.dir, ev.name);
      // An event about a watched directory itself (e.g. it was deleted): handled via its parent.
      if (ev.name === path.basename(ev.dir) && !(await lstatOrUndefined(ev.dir))) {
        this.dropDir(ev.dir);
        continue;
      }
      const uploadTarget = targetOfTemp(ev.name);
      if (uploadTarget !== undefined) {
        // envd's own upload temp file: hidden; its rename onto the target is reported instead
        if (this.uploads.size > 1000) {
          for (const [k, t] of this.uploads) if (Date.now() - t > 60_000) this.uploads.delete(k);
        }
        this.uploads.set(path.join(ev.dir, uploadTarget), Date.now());
        continue;
      }
      const st = await lstatOrUndefined(full);
      const prev = this.cache.get(full);
      if (ev.kind === "change") {
        if (!st) continue;
        this.cache.set(full, known(st));
        const chmodOnly =
          prev !== undefined && prev.mode !== st.mode && prev.mtimeMs === st.mtimeMs && prev.size === st.size;
        await this.emit(full, chmodOnly ? filesystemPb.EventType.CHMOD : filesystemPb.EventType.WRITE, st);
        continue;
      }
      if (st) {
        this.cache.set(full, known(st));
        if (prev?.isDir && (prev.ino !== st.ino || !st.isDirectory())) this.dropDir(full);
        const uploadedAt = this.uploads.get(full);
        if (uploadedAt !== undefined) {
          this.uploads.delete(full);
          if (Date.now() - uploadedAt < 60_000) {
            // an upload committed: like an in-place write (CREATE first when the file is new)
            if (!prev) await this.emit(full, filesystemPb.EventType.CREATE, st);
            await this.emit(full, filesystemPb.EventType.WRITE, st);
            continue;
          }
        }
        await this.emit(full, filesystemPb.EventType.CREATE, st);
        if (this.opts.recursive && st.isDirectory()) await this.addDir(full, false, true);
        continue;
      }
      // gone: renamed away (its inode reappears in this batch) or removed
      this.cache.delete(full);
      if (prev?.isDir) this.dropDir(full);
      const renamed = prev !== undefined && (await this.reappears(prev.ino, full));
      await this.emit(full, renamed ? filesystemPb.EventType.RENAME : filesystemPb.EventType.REMOVE);
    }
  }

  private async reappears(ino: number, gone: string): Promise<boolean> {
    for (const r of this.raw) {
      if (r.kind !== "rename") continue;
      const candidate = path.join(r.dir, r.name);
      if (candidate === gone) continue;
      const st = await lstatOrUndefined(candidate);
      if (st && st.ino === ino) return true;
    }
    return false;
  }

  private async emit(full: string, type: filesystemPb.EventType, st?: Stats): Promise<void> {
    const name = path.relative(this.root, full);
    if (!name || name.startsWith("..")) return;
    if (!this.opts.recursive && name.includes("/")) return;
    let entry: filesystemPb.EntryInfo | undefined;
    if (
      this.opts.includeEntry &&
      st &&
      type !== filesystemPb.EventType.REMOVE &&
      type !== filesystemPb.EventType.RENAME
    ) {
      try {
        entry = await entryFromStat(full, st, {
          accounts: await this.deps.users.accounts(),
          metadata: this.deps.metadata,
        });
      } catch {
        entry = undefined;
      }
    }
    if (this.closed) return;
    this.onEvent({ name, type, entry });
  }
}
