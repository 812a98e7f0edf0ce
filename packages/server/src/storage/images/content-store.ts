/**
 * Files stored once per node by content: a regular file unpacked from any layer of any image
 * lands here under its sha256 and metadata, and image trees hard-link to it. A hundred images
 * that share a base hold the base's bytes once on disk and, being the same inodes, once in the
 * page cache.
 *
 * A hard link shares the inode's owner, mode and mtime, so they are part of the key: two files
 * with the same bytes and different modes are two entries. Entries are never written after
 * they are published (trees linked to them are only read: sandboxes write to runsc's overlay
 * above the tree, builds with steps unpack without this store). An entry whose only link is its
 * own (`nlink == 1`) belongs to no tree and is what `sweep` removes.
 */
import { createHash, randomBytes } from "node:crypto";
import { constants, type Stats } from "node:fs";
import { link, lstat, mkdir, open, readdir, rename, rm, unlink } from "node:fs/promises";
import { join } from "node:path";

export interface FileMeta {
  mode: number;
  uid: number;
  gid: number;
  /** Seconds since the epoch. */
  mtime: number;
}

/** What placing one file cost: bytes newly stored on this node (0 when its content was there). */
export interface Placed {
  newBytes: number;
  shared: boolean;
  /** The content key, and the inode the tree's path now has (a tree index maps one to the other). */
  key: string;
  ino: number;
}

const BLOCK = 4096;
/** Disk a file of `size` bytes takes, in whole blocks (what `du` would count). */
export const onDisk = (size: number) => Math.ceil(size / BLOCK) * BLOCK;

const KEY_RE = /^([0-9a-f]{64})-([0-7]{1,5})-(\d{1,10})-(\d{1,10})-(\d{1,12})$/;

/** What a content key says about its file; undefined for anything that is not one. */
export function metaOfKey(key: string): (FileMeta & { hex: string }) | undefined {
  const m = KEY_RE.exec(key);
  if (!m) return undefined;
  return {
    hex: m[1] as string,
    mode: Number.parseInt(m[2] as string, 8),
    uid: Number(m[3]),
    gid: Number(m[4]),
    mtime: Number(m[5]),
  };
}

export class ContentStore {
  readonly root: string;
  private readonly tmpDir: string;
  private readonly asRoot = process.getuid?.() === 0;

  constructor(dir: string) {
    this.root = join(dir, "sha256");
    this.tmpDir = join(dir, "tmp");
  }

  async init(): Promise<void> {
    // A temp file is unfinished work of a process that is gone: never an entry.
    await rm(this.tmpDir, { recursive: true, force: true });
    await mkdir(this.tmpDir, { recursive: true, mode: 0o700 });
    await mkdir(this.root, { recursive: true, mode: 0o700 });
  }

  static key(hex: string, m: FileMeta): string {
    return `${hex}-${(m.mode & 0o7777).toString(8)}-${m.uid}-${m.gid}-${Math.floor(m.mtime)}`;
  }

  entryPath(key: string): string {
    return join(this.root, key.slice(0, 2), key);
  }

  /**
   * Writes `body` as a file with `meta` at `dest` (which must not exist), through the store:
   * content already stored is linked instead of kept twice. `privateKeys` are the keys the
   * calling tree already links: a second path with the same key gets its own inode, so a tree
   * has exactly the hard links its layers made (a build copying it keeps them apart).
   */
  async place(body: AsyncIterable<Buffer>, meta: FileMeta, dest: string, privateKeys: Set<string>): Promise<Placed> {
    const tmp = join(this.tmpDir, randomBytes(8).toString("hex"));
    const hash = createHash("sha256");
    let size = 0;
    const fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    try {
      for await (const chunk of body) {
        hash.update(chunk);
        size += chunk.length;
        await fh.write(chunk);
      }
      if (this.asRoot && (meta.uid !== 0 || meta.gid !== 0)) await fh.chown(meta.uid, meta.gid);
      await fh.chmod(meta.mode); // after chown, which clears setuid bits
      await fh.utimes(meta.mtime, meta.mtime);
    } catch (e) {
      await fh.close();
      await unlink(tmp).catch(() => {});
      throw e;
    }
    const { ino } = await fh.stat();
    await fh.close();
    const key = ContentStore.key(hash.digest("hex"), meta);
    const entry = this.entryPath(key);
    const own = { newBytes: onDisk(size), shared: false, key, ino };
    if (privateKeys.has(key)) {
      await rename(tmp, dest);
      return own;
    }
    privateKeys.add(key);
    try {
      await link(tmp, entry);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") {
        await mkdir(join(this.root, key.slice(0, 2)), { recursive: true, mode: 0o700 });
        await link(tmp, entry).catch((e2: NodeJS.ErrnoException) => {
          if (e2.code !== "EEXIST") throw e2;
        });
        return this.placeExisting(tmp, entry, dest, own);
      }
      if (code !== "EEXIST") throw e;
      return this.placeExisting(tmp, entry, dest, own);
    }
    await rename(tmp, dest);
    return own;
  }

  /** Links the stored entry at `dest`; the file just written is dropped, or kept if linking fails. */
  private async placeExisting(tmp: string, entry: string, dest: string, own: Placed): Promise<Placed> {
    const est = await lstat(entry);
    if (own.ino === est.ino) {
      // This call created the entry (after making its folder).
      await rename(tmp, dest);
      return own;
    }
    try {
      await link(entry, dest);
    } catch (e) {
      // EMLINK: an entry linked from more trees than the filesystem counts; ENOENT: a sweep
      // took the entry after no tree linked it. Either way this tree keeps a copy of its own.
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== "EMLINK" && code !== "ENOENT") throw e;
      await rename(tmp, dest);
      return own;
    }
    await unlink(tmp);
    return { newBytes: 0, shared: true, key: own.key, ino: est.ino };
  }

  /** The stored entry's path when it is here. */
  async has(key: string): Promise<boolean> {
    return (await lstat(this.entryPath(key)).catch(() => null))?.isFile() ?? false;
  }

  /**
   * Stores content that arrived by its key (from a peer): written to a temp file, its sha256
   * checked against the key, its owner, mode and mtime set from the key, then published.
   * Anything else is refused and nothing is stored.
   */
  async adopt(body: AsyncIterable<Buffer>, key: string, maxBytes: number): Promise<number> {
    const meta = metaOfKey(key);
    if (!meta) throw new Error(`not a content key: ${key.slice(0, 80)}`);
    const tmp = join(this.tmpDir, randomBytes(8).toString("hex"));
    const hash = createHash("sha256");
    let size = 0;
    const fh = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    try {
      try {
        for await (const chunk of body) {
          size += chunk.length;
          if (size > maxBytes) throw new Error(`content ${key.slice(0, 12)} is longer than its ${maxBytes} bytes`);
          hash.update(chunk);
          await fh.write(chunk);
        }
        const got = hash.digest("hex");
        if (got !== meta.hex)
          throw new Error(`content ${key.slice(0, 12)} arrived as ${got.slice(0, 12)} (digest mismatch)`);
        if (this.asRoot && (meta.uid !== 0 || meta.gid !== 0)) await fh.chown(meta.uid, meta.gid);
        await fh.chmod(meta.mode);
        await fh.utimes(meta.mtime, meta.mtime);
      } finally {
        await fh.close();
      }
      await mkdir(join(this.root, key.slice(0, 2)), { recursive: true, mode: 0o700 });
      await link(tmp, this.entryPath(key)).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== "EEXIST") throw e;
      });
      return onDisk(size);
    } finally {
      await unlink(tmp).catch(() => {});
    }
  }

  /** Every stored entry with its stat (entries gone meanwhile are skipped). */
  private async *entries(): AsyncGenerator<{ path: string; st: Stats }> {
    for (const shard of await readdir(this.root).catch(() => [] as string[])) {
      const dir = join(this.root, shard);
      for (const name of await readdir(dir).catch(() => [] as string[])) {
        const path = join(dir, name);
        const st = await lstat(path).catch(() => null);
        if (st) yield { path, st };
      }
    }
  }

  /** Removes entries no tree links any more; returns the bytes freed. */
  async sweep(): Promise<{ entries: number; bytes: number }> {
    let entries = 0;
    let bytes = 0;
    for await (const { path, st } of this.entries()) {
      if (st.nlink > 1) continue;
      await unlink(path).catch(() => {});
      entries++;
      bytes += st.blocks * 512;
    }
    return { entries, bytes };
  }

  /** Bytes of every stored entry (each counted once, whatever links it). */
  async usage(): Promise<{ entries: number; bytes: number }> {
    let entries = 0;
    let bytes = 0;
    for await (const { st } of this.entries()) {
      entries++;
      bytes += st.blocks * 512;
    }
    return { entries, bytes };
  }
}
