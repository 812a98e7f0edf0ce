/**
 * Applies layer tars, in order, to a rootfs directory — safely. Every path is resolved component
 * by component with lstat, never by the kernel: a symlink in a parent position is followed only
 * if it is relative and stays inside the rootfs; absolute or escaping ones (and `..`, absolute
 * entry names, hard links out) are refused with UnsafeLayerError. Files are created with
 * O_NOFOLLOW|O_EXCL after removing what was there, so a final-component symlink is replaced,
 * never written through.
 */
import { constants } from "node:fs";
import {
  chmod,
  lchown,
  link,
  lstat,
  lutimes,
  mkdir,
  open,
  readdir,
  readlink,
  rm,
  symlink,
  utimes,
} from "node:fs/promises";
import { join } from "node:path";
import { type ContentStore, onDisk, type Placed } from "./content-store.js";
import { ImagePullError, UnsafeLayerError } from "./errors.js";
import type { TarEntry, TarHeader } from "./tar.js";

export interface UnpackStats {
  files: number;
  dirs: number;
  symlinks: number;
  hardlinks: number;
  whiteouts: number;
  /** Character/block devices, fifos: not created (a sandbox gets its /dev from the runtime). */
  skippedDevices: number;
  /** Unknown entry types (sparse, volume headers…), skipped. */
  skippedOther: number;
  /** Entries whose xattrs were not applied (Node cannot set xattrs). */
  xattrsIgnored: number;
  /** Files linked to content the node already stored (unpacks through a content store). */
  sharedFiles: number;
  /** Bytes this unpack added to the node's disk (files, in whole blocks; shared ones are free). */
  newBytes: number;
}

export const emptyStats = (): UnpackStats => ({
  files: 0,
  dirs: 0,
  symlinks: 0,
  hardlinks: 0,
  whiteouts: 0,
  skippedDevices: 0,
  skippedOther: 0,
  xattrsIgnored: 0,
  sharedFiles: 0,
  newBytes: 0,
});

const WH = ".wh.";
const OPAQUE = ".wh..wh..opq";
const MAX_LINK_HOPS = 40;
const MAX_NAME_BYTES = 4096;

interface DirMeta {
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
}

/** `a/./b/` → ["a","b"]; refuses absolute names and `..`. */
export function entryParts(name: string): string[] {
  // Longer names cannot be written (PATH_MAX); refusing them first saves creating thousands of
  // folders on the way to ENAMETOOLONG, and keeps a name of megabytes out of the message.
  if (Buffer.byteLength(name) > MAX_NAME_BYTES) {
    throw new ImagePullError(
      "bad-layer",
      `an entry name is longer than ${MAX_NAME_BYTES} bytes: ${JSON.stringify(`${name.slice(0, 64)}…`)}`,
    );
  }
  if (name.startsWith("/")) throw new UnsafeLayerError(name, "is an absolute path");
  const parts = name.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw new UnsafeLayerError(name, "contains a '..' component");
  return parts;
}

const isNotFound = (e: unknown) => (e as NodeJS.ErrnoException).code === "ENOENT";

async function lstatOrNull(p: string) {
  try {
    return await lstat(p);
  } catch (e) {
    if (isNotFound(e)) return null;
    throw e;
  }
}

/**
 * Room on a bounded disk: `room(bytes)` waits while space is made for up to `bytes` more, or
 * throws if none can be; the function it returns is called with what was really added.
 */
export interface DiskBudget {
  room(bytes: number): Promise<(added: number) => void>;
}

/** Where an unpack stores file content, and the budget it writes within. */
export interface UnpackContent {
  store: ContentStore;
  budget: DiskBudget;
}

export class RootfsWriter {
  readonly stats = emptyStats();
  private readonly dirMeta = new Map<string, DirMeta>();
  /** Resolved paths this layer wrote: whiteouts and opaque markers spare them (OCI: they only hide lower layers). */
  private layerPaths = new Set<string>();
  private readonly asRoot = process.getuid?.() === 0;
  /** Paths known to be real directories; cleared whenever something is removed or replaced. */
  private knownDirs = new Set<string>();

  /** Content keys this tree links (see ContentStore.place). */
  private readonly treeKeys = new Set<string>();
  /** The content key of each file placed through the store, by inode (for a tree index). */
  readonly keysByIno = new Map<number, string>();

  constructor(
    readonly root: string,
    private readonly log: (msg: string) => void = () => {},
    private readonly content?: UnpackContent,
  ) {}

  /**
   * Resolves `parts` as a chain of directories inside the rootfs and returns the resolved
   * components. Missing ones are created when `create`, else null is returned.
   */
  private async resolveDir(parts: string[], entry: string, create: boolean): Promise<string[] | null> {
    let resolved: string[] = [];
    let queue = [...parts];
    let hops = 0;
    while (queue.length) {
      const c = queue.shift()!;
      const key = resolved.length ? `${resolved.join("/")}/${c}` : c;
      if (this.knownDirs.has(key)) {
        resolved.push(c);
        continue;
      }
      const p = join(this.root, key);
      const st = await lstatOrNull(p);
      if (!st) {
        if (!create) return null;
        await mkdir(p, { mode: 0o755 });
        resolved.push(c);
        this.layerPaths.add(key);
        this.knownDirs.add(key);
        continue;
      }
      if (st.isDirectory()) {
        resolved.push(c);
        this.knownDirs.add(key);
        continue;
      }
      const shown = [...resolved, c].join("/");
      if (!st.isSymbolicLink()) throw new ImagePullError("bad-layer", `${entry}: ${shown} is not a directory`);
      if (++hops > MAX_LINK_HOPS) throw new UnsafeLayerError(entry, "goes through too many symlinks");
      const target = await readlink(p);
      if (target.startsWith("/")) {
        throw new UnsafeLayerError(entry, `is written through the absolute symlink ${shown} -> ${target}`);
      }
      const base = [...resolved];
      for (const seg of target.split("/")) {
        if (seg === "" || seg === ".") continue;
        if (seg !== "..") base.push(seg);
        else if (base.pop() === undefined) {
          throw new UnsafeLayerError(
            entry,
            `is written through the symlink ${shown} -> ${target}, which leaves the rootfs`,
          );
        }
      }
      // Re-walk from the top: the target's own components may be symlinks too.
      queue = [...base, ...queue];
      resolved = [];
    }
    return resolved;
  }

  /** Removes whatever is at `abs` (a symlink is removed, not followed). */
  private async clear(abs: string, keepDir: boolean): Promise<boolean> {
    const st = await lstatOrNull(abs);
    if (!st) return false;
    if (keepDir && st.isDirectory()) return true;
    if (st.isDirectory()) this.knownDirs.clear();
    await rm(abs, { recursive: true, force: true });
    return false;
  }

  async applyLayer(entries: AsyncIterable<TarEntry>): Promise<void> {
    this.layerPaths = new Set();
    for await (const e of entries) {
      try {
        await this.apply(e);
      } catch (err) {
        // What is not the filesystem's (a disk budget's refusal) is the caller's to report.
        if (err instanceof ImagePullError || !(err as NodeJS.ErrnoException).syscall) throw err;
        throw new ImagePullError(
          "bad-layer",
          `cannot unpack ${JSON.stringify(e.header.name)}: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      }
    }
  }

  private async apply({ header: h, body }: TarEntry): Promise<void> {
    const parts = entryParts(h.name);
    if (Object.keys(h.xattrs).length) this.stats.xattrsIgnored++;
    const base = parts.at(-1);
    if (base?.startsWith(WH)) return this.whiteout(h.name, parts.slice(0, -1), base);
    if (h.type === "char" || h.type === "block" || h.type === "fifo") {
      this.stats.skippedDevices++;
      this.log(`skipped ${h.type} device ${h.name}`);
      return;
    }
    if (h.type === "other") {
      this.stats.skippedOther++;
      this.log(`skipped ${h.name} (tar type ${JSON.stringify(h.typeflag)})`);
      return;
    }
    if (parts.length === 0) {
      if (h.type === "dir") this.dirMeta.set("", meta(h));
      return;
    }
    const parent = await this.resolveDir(parts.slice(0, -1), h.name, true);
    const rel = [...parent!, base!].join("/");
    const abs = join(this.root, rel);
    this.layerPaths.add(rel);
    switch (h.type) {
      case "dir": {
        if (!(await this.clear(abs, true))) {
          // A folder takes a block of its own: counted where the disk is bounded.
          const done = await this.content?.budget.room(4096);
          await mkdir(abs, { mode: 0o700 });
          done?.(4096);
        }
        this.knownDirs.add(rel);
        this.dirMeta.set(rel, meta(h));
        this.stats.dirs++;
        return;
      }
      case "file": {
        if (this.content && h.size > 0) {
          const done = await this.content.budget.room(onDisk(h.size));
          let placed: Placed = { newBytes: onDisk(h.size), shared: false, key: "", ino: 0 };
          try {
            await this.clear(abs, false);
            placed = await this.content.store.place(body, h, abs, this.treeKeys);
            this.keysByIno.set(placed.ino, placed.key);
          } finally {
            done(placed.newBytes);
          }
          this.stats.newBytes += placed.newBytes;
          if (placed.shared) this.stats.sharedFiles++;
          this.stats.files++;
          return;
        }
        const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
        // O_EXCL first: most paths are new, and the lstat+rm of clear() is only needed when not.
        const fh = await open(abs, flags, 0o600).catch(async (e: NodeJS.ErrnoException) => {
          if (e.code !== "EEXIST") throw e;
          await this.clear(abs, false);
          return open(abs, flags, 0o600);
        });
        try {
          for await (const chunk of body) await fh.write(chunk);
          // A new file is already root's; parent dirs stay 0700 without setgid until finish().
          if (this.asRoot && (h.uid !== 0 || h.gid !== 0)) await fh.chown(h.uid, h.gid);
          await fh.chmod(h.mode); // after chown, which clears setuid bits
          await fh.utimes(h.mtime, h.mtime);
        } finally {
          await fh.close();
        }
        this.stats.newBytes += onDisk(h.size);
        this.stats.files++;
        return;
      }
      case "symlink": {
        await this.clear(abs, false);
        await symlink(h.linkname, abs); // stored as-is; never followed by this writer
        if (this.asRoot) await lchown(abs, h.uid, h.gid);
        await lutimes(abs, h.mtime, h.mtime);
        this.stats.symlinks++;
        return;
      }
      case "hardlink": {
        const tparts = (() => {
          try {
            return entryParts(h.linkname);
          } catch {
            throw new UnsafeLayerError(h.name, `is a hard link to ${JSON.stringify(h.linkname)}, outside the rootfs`);
          }
        })();
        if (!tparts.length) throw new UnsafeLayerError(h.name, "is a hard link to the rootfs itself");
        const tparent = await this.resolveDir(tparts.slice(0, -1), h.name, false);
        const tabs = tparent && join(this.root, ...tparent, tparts.at(-1)!);
        const tst = tabs ? await lstatOrNull(tabs) : null;
        if (!tabs || !tst)
          throw new ImagePullError("bad-layer", `${h.name}: hard link target ${h.linkname} does not exist`);
        if (tst.isDirectory()) throw new UnsafeLayerError(h.name, `is a hard link to the directory ${h.linkname}`);
        if (tabs === abs) return;
        await this.clear(abs, false);
        await link(tabs, abs); // linkat without AT_SYMLINK_FOLLOW: a symlink target is linked, not followed
        this.stats.hardlinks++;
        return;
      }
    }
  }

  private async whiteout(name: string, dirParts: string[], base: string): Promise<void> {
    this.stats.whiteouts++;
    const dir = await this.resolveDir(dirParts, name, false);
    if (!dir) return;
    if (base === OPAQUE) {
      const abs = join(this.root, ...dir);
      const st = await lstatOrNull(abs);
      if (!st?.isDirectory()) return;
      for (const child of await readdir(abs)) {
        const rel = [...dir, child].join("/");
        if (this.layerPaths.has(rel)) continue;
        this.knownDirs.clear();
        await rm(join(abs, child), { recursive: true, force: true });
      }
      return;
    }
    const target = base.slice(WH.length);
    if (target.startsWith(WH) || target === "" || target === "." || target === "..") return; // aufs metadata
    const rel = [...dir, target].join("/");
    if (this.layerPaths.has(rel)) return;
    this.knownDirs.clear();
    await rm(join(this.root, rel), { recursive: true, force: true });
  }

  /**
   * Applies directory owners, modes and mtimes last (children change a directory's mtime, and a
   * read-only mode would block writing them). Paths are re-checked: a later layer may have
   * replaced a directory, or one of its parents, by a symlink.
   */
  async finish(): Promise<void> {
    const keys = [...this.dirMeta.keys()].sort((a, b) => b.split("/").length - a.split("/").length);
    for (const rel of keys) {
      const m = this.dirMeta.get(rel)!;
      const parts = rel ? rel.split("/") : [];
      let ok = true;
      for (let i = 1; i <= parts.length && ok; i++) {
        const st = await lstatOrNull(join(this.root, ...parts.slice(0, i)));
        ok = !!st?.isDirectory();
      }
      if (!ok) continue;
      const abs = join(this.root, ...parts);
      if (this.asRoot) await lchown(abs, m.uid, m.gid);
      await chmod(abs, m.mode);
      await utimes(abs, m.mtime, m.mtime);
    }
  }
}

function meta(h: TarHeader): DirMeta {
  return { mode: h.mode, uid: h.uid, gid: h.gid, mtime: h.mtime };
}
