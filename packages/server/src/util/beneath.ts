/**
 * File operations beneath a root that someone else can change while we work (a volume a
 * sandbox mounts, a repository folder others write): no symlink under the root is ever
 * followed, and no path is checked and then used by name.
 *
 * Linux has openat2(RESOLVE_BENEATH) for this, but Node exposes no *at() calls. The same
 * guarantee comes from descriptors: every folder on the way is opened with
 * O_DIRECTORY|O_NOFOLLOW relative to the descriptor of the one before it, through the
 * `/proc/self/fd/N/<name>` magic link (the kernel resolves `/proc/self/fd/N` to the open
 * folder itself, not to any path, then looks `<name>` up inside it). An operation then names
 * one plain component inside an open folder: whatever a racer renames or swaps for a link
 * after a folder was opened, the operation still lands in that folder, inside the root.
 * Calls that do not follow their last component (lstat, unlink, rmdir, mkdir, rename, link,
 * open with O_NOFOLLOW or O_EXCL) are safe on such a name; the others go through a
 * descriptor (fchmod, fchown, fstat).
 */
import { constants, type Dirent, type Stats } from "node:fs";
import { chmod, chown, type FileHandle, lstat, mkdir, open, readdir, rmdir, unlink } from "node:fs/promises";

/** O_PATH (Linux, every architecture Node runs on): a descriptor that names an inode without opening it for I/O. */
const O_PATH = 0o10000000;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
/** Folders deeper than this are refused by the recursive remove instead of exhausting descriptors. */
export const MAX_DEPTH = 1024;

export type BeneathErrorKind = "not-found" | "symlink" | "not-directory" | "invalid" | "too-deep";

/** A path beneath the root could not be used; `kind` lets callers map it to their own errors. */
export class BeneathError extends Error {
  constructor(
    readonly kind: BeneathErrorKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "BeneathError";
  }
}

const errCode = (err: unknown) => (err as NodeJS.ErrnoException)?.code;

/** One path component: no separators, no NUL, not "." or "..". */
export function assertName(name: string): void {
  if (name === "" || name === "." || name === ".." || name.includes("/") || name.includes("\0")) {
    throw new BeneathError("invalid", `'${name}' is not a single path component`);
  }
}

/** An open folder; entries are named through it, never by a host path string. */
export class Dir {
  private constructor(
    private readonly fh: FileHandle,
    /** Where it is, for messages only: "/" or "/a/b" relative to the root. */
    readonly rel: string,
  ) {}

  static async open(path: string, rel: string, follow: boolean): Promise<Dir> {
    return new Dir(await open(path, follow ? constants.O_RDONLY | constants.O_DIRECTORY : DIR_FLAGS), rel);
  }

  /** The folder itself, as a path any call can take (it resolves through the descriptor). */
  get self(): string {
    return `/proc/self/fd/${this.fh.fd}`;
  }

  /** The entry `name` inside this folder, for calls that do not follow their last component. */
  at(name: string): string {
    assertName(name);
    return `${this.self}/${name}`;
  }

  relOf(name: string): string {
    return this.rel === "/" ? `/${name}` : `${this.rel}/${name}`;
  }

  /** A sub-folder, opened without following a link. */
  async sub(name: string): Promise<Dir> {
    try {
      return await Dir.open(this.at(name), this.relOf(name), false);
    } catch (err) {
      // O_DIRECTORY|O_NOFOLLOW on a link fails ENOTDIR, like a file: lstat tells them apart
      // for the message only (nothing is done with the name afterwards).
      if (errCode(err) === "ENOTDIR" && (await this.lstat(name).catch(() => undefined))?.isSymbolicLink()) {
        throw new BeneathError("symlink", `path ${this.relOf(name)} is a symlink; links are not followed`);
      }
      throw dirError(err, this.relOf(name));
    }
  }

  /** A sub-folder, created (mode, then umask-free chmod) when missing. */
  async subOrCreate(name: string, mode: number): Promise<Dir> {
    try {
      await mkdir(this.at(name), { mode });
      const d = await this.sub(name);
      await d.fh.chmod(mode).catch(async (err) => {
        await d.close();
        throw err;
      });
      return d;
    } catch (err) {
      if (errCode(err) !== "EEXIST") throw err;
    }
    return this.sub(name);
  }

  lstat(name: string): Promise<Stats | undefined> {
    return lstat(this.at(name)).catch((err) => {
      if (errCode(err) === "ENOENT") return undefined;
      throw err;
    });
  }

  entries(): Promise<Dirent[]> {
    return readdir(this.self, { withFileTypes: true });
  }

  /** Opens a regular file (never a link, never blocking on a FIFO); `mode` for O_CREAT. */
  async openFile(name: string, flags: number, mode?: number): Promise<FileHandle> {
    const fh = await open(this.at(name), flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, mode);
    try {
      const st = await fh.stat();
      if (!st.isFile()) throw new BeneathError("invalid", `${this.relOf(name)} is not a regular file`);
      return fh;
    } catch (err) {
      await fh.close();
      throw err;
    }
  }

  /**
   * Changes mode and owner of an entry that is not a link: through an O_PATH descriptor of
   * the entry, so a link swapped in afterwards changes nothing.
   */
  async setOwnership(name: string, o: { mode?: number; uid?: number; gid?: number }): Promise<Stats> {
    const fh = await open(this.at(name), O_PATH | constants.O_NOFOLLOW).catch((err) => {
      if (errCode(err) === "ENOENT") throw new BeneathError("not-found", `path ${this.relOf(name)} not found`);
      throw err;
    });
    try {
      const st = await fh.stat();
      if (st.isSymbolicLink())
        throw new BeneathError("symlink", `path ${this.relOf(name)} is a symlink; links are not followed`);
      // An O_PATH descriptor takes no fchmod; its /proc/self/fd link reaches the inode itself.
      const self = `/proc/self/fd/${fh.fd}`;
      if (o.mode !== undefined) await chmod(self, o.mode);
      if (o.uid !== undefined || o.gid !== undefined) await chown(self, o.uid ?? -1, o.gid ?? -1);
      return await fh.stat();
    } finally {
      await fh.close();
    }
  }

  /** fsync of the folder: makes a new entry or a rename in it durable. */
  sync(): Promise<void> {
    return this.fh.sync();
  }

  chmod(mode: number): Promise<void> {
    return this.fh.chmod(mode);
  }

  chown(uid: number, gid: number): Promise<void> {
    return this.fh.chown(uid, gid);
  }

  stat(): Promise<Stats> {
    return this.fh.stat();
  }

  close(): Promise<void> {
    return this.fh.close();
  }

  /**
   * Removes `name` and, when it is a folder, everything in it. Each level is opened by
   * descriptor before its entries are removed, so a folder swapped for a link mid-way is
   * unlinked as a link, and nothing outside this folder is touched.
   */
  async removeTree(name: string, depth = 0): Promise<void> {
    try {
      await unlink(this.at(name));
      return;
    } catch (err) {
      const code = errCode(err);
      if (code === "ENOENT") return;
      if (code !== "EISDIR" && code !== "EPERM") throw err;
    }
    if (depth >= MAX_DEPTH) throw new BeneathError("too-deep", `${this.relOf(name)} is nested over ${MAX_DEPTH} deep`);
    let sub: Dir;
    try {
      sub = await this.sub(name);
    } catch (err) {
      // It changed between the two calls (now a link or a file): try again as what it is now.
      if (err instanceof BeneathError && err.kind !== "not-found") return this.removeTree(name, depth + 1);
      if (err instanceof BeneathError) return;
      throw err;
    }
    try {
      for (const e of await sub.entries()) await sub.removeTree(e.name, depth + 1);
    } finally {
      await sub.close();
    }
    await rmdir(this.at(name)).catch((err) => {
      if (errCode(err) !== "ENOENT") throw err;
    });
  }
}

function dirError(err: unknown, rel: string): unknown {
  switch (errCode(err)) {
    case "ENOENT":
      return new BeneathError("not-found", `path ${rel} not found`, { cause: err });
    case "ELOOP":
      return new BeneathError("symlink", `path ${rel} is a symlink; links are not followed`, { cause: err });
    case "ENOTDIR":
      return new BeneathError("not-directory", `${rel} is not a directory`, { cause: err });
    default:
      return err;
  }
}

export interface WalkOptions {
  /** Create missing folders with this mode instead of failing. */
  createMode?: number;
}

/**
 * Opens the folder `parts` beneath `root`, one component at a time, never following a link
 * below the root (the root itself is the operator's and may be one). The caller closes it.
 */
export async function openBeneath(root: string, parts: readonly string[], opts: WalkOptions = {}): Promise<Dir> {
  for (const p of parts) assertName(p);
  let cur: Dir;
  try {
    cur = await Dir.open(root, "/", true);
  } catch (err) {
    throw dirError(err, "/");
  }
  for (const part of parts) {
    let next: Dir;
    try {
      next = opts.createMode === undefined ? await cur.sub(part) : await cur.subOrCreate(part, opts.createMode);
    } catch (err) {
      await cur.close();
      throw err;
    }
    await cur.close();
    cur = next;
  }
  return cur;
}

/** Runs `fn` with the folder `parts` beneath `root` open, and closes it after. */
export async function withDir<T>(
  root: string,
  parts: readonly string[],
  fn: (dir: Dir) => Promise<T>,
  opts: WalkOptions = {},
): Promise<T> {
  const dir = await openBeneath(root, parts, opts);
  try {
    return await fn(dir);
  } finally {
    await dir.close();
  }
}

/**
 * Writes a stream into an open file through its descriptor, calling `onTotal` with the bytes
 * so far before each chunk is written (it throws to stop). Not a WriteStream over the handle:
 * one with autoClose off keeps a reference that makes the handle's close() wait forever.
 */
export async function writeStream(
  fh: FileHandle,
  body: AsyncIterable<Uint8Array | string>,
  onTotal?: (total: number) => void,
): Promise<number> {
  let total = 0;
  for await (const piece of body) {
    const chunk = typeof piece === "string" ? Buffer.from(piece) : piece;
    total += chunk.length;
    onTotal?.(total);
    for (let off = 0; off < chunk.length; ) {
      const { bytesWritten } = await fh.write(chunk, off, chunk.length - off);
      off += bytesWritten;
    }
  }
  return total;
}
