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
import { basename, dirname } from "node:path";

/** O_PATH (Linux, every architecture Node runs on): a descriptor that names an inode without opening it for I/O. */
const O_PATH = 0o10000000;
const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
export type BeneathErrorKind = "not-found" | "symlink" | "not-directory" | "invalid";

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
   * unlinked as a link, and nothing outside this folder is touched. However deep the tree,
   * it holds three descriptors at most besides this folder's (see walkTree), so concurrent
   * removals of deep trees cannot run the process out of descriptors.
   */
  async removeTree(name: string): Promise<void> {
    for (let tries = 0; ; tries++) {
      if (await unlinkEntry(this, name)) return;
      let sub: Dir;
      try {
        sub = await this.sub(name);
      } catch (err) {
        if (!(err instanceof BeneathError)) throw err;
        if (err.kind === "not-found") return;
        // It changed between the two calls (now a link or a file): removed as what it is now,
        // a few times over against a racer that keeps flipping it.
        if (tries < 8) continue;
        throw err;
      }
      try {
        await walkTree(sub, REMOVE);
      } finally {
        await sub.close();
      }
      await rmdir(this.at(name)).catch(ignoreGone);
      return;
    }
  }
}

const ignoreGone = (err: unknown) => {
  if (errCode(err) !== "ENOENT") throw err;
};

/** Unlinks `name` unless it is a folder: true when it is gone (or never was), false for a folder. */
async function unlinkEntry(dir: Dir, name: string): Promise<boolean> {
  try {
    await unlink(dir.at(name));
    return true;
  } catch (err) {
    const code = errCode(err);
    if (code === "ENOENT") return true;
    // Linux answers EISDIR for a folder; some filesystems EPERM.
    if (code === "EISDIR" || code === "EPERM") return false;
    throw err;
  }
}

/** removeTree's walk: files and links go as each folder is entered, the folder once it is empty. */
const REMOVE: TreeVisitor = {
  async enter(dir) {
    const subs: string[] = [];
    for (const e of await dir.entries()) {
      if (e.isDirectory() || !(await unlinkEntry(dir, e.name))) subs.push(e.name);
    }
    return subs;
  },
  notFolder: async (parent, name) => {
    await unlinkEntry(parent, name);
  },
  leave: (parent, name) => rmdir(parent.at(name)).catch(ignoreGone),
};

/** What walkTree does in each folder of a tree. */
export interface TreeVisitor {
  /** Called once in each folder as it is entered; returns the names of the sub-folders to walk. */
  enter(dir: Dir): Promise<string[]>;
  /** A name that `enter` returned is no folder any more (a link or a file now): it is not walked. */
  notFolder?(parent: Dir, name: string): Promise<void>;
  /** Everything under `name` has been walked; its parent is open. */
  leave?(parent: Dir, name: string): Promise<void>;
}

/** One folder on the way down from the top of a walk. */
interface Level {
  name: string;
  dev: number;
  ino: number;
  /** Sub-folders still to walk. */
  pending: string[];
}

/**
 * Walks the folders under `top` (open, the caller's: not closed here) depth first, every
 * folder opened by descriptor from its parent without following a link, as Dir.sub does.
 *
 * A recursive walk holds a descriptor per level, which a deep tree (a sandbox can nest
 * folders as deep as it likes) turns into thousands per walk. This one holds only the
 * folder it is in, besides `top`: it comes back up through `..` of that folder's
 * descriptor, and uses the parent so reached only when its device and inode are those of
 * the folder it went down from. When they are not (a racer moved the folder meanwhile, and
 * its `..` may be anywhere, outside `top` too), the parent is found again by name from
 * `top`, each step beneath the one before; a folder no longer found is left, its rest unwalked.
 */
export async function walkTree(top: Dir, visitor: TreeVisitor): Promise<void> {
  const topSt = await top.stat();
  const stack: Level[] = [{ name: "", dev: topSt.dev, ino: topSt.ino, pending: await visitor.enter(top) }];
  let cur = top;
  try {
    while (stack.length > 0) {
      const level = stack[stack.length - 1] as Level;
      const name = level.pending.pop();
      if (name !== undefined) {
        let child: Dir;
        try {
          child = await cur.sub(name);
        } catch (err) {
          if (!(err instanceof BeneathError)) throw err;
          if (err.kind !== "not-found") await visitor.notFolder?.(cur, name);
          continue;
        }
        if (cur !== top) await cur.close();
        cur = child;
        const st = await cur.stat();
        stack.push({ name, dev: st.dev, ino: st.ino, pending: await visitor.enter(cur) });
        continue;
      }
      stack.pop();
      if (stack.length === 0) break;
      const depth = stack.length;
      const parent = await climb(top, cur, stack);
      if (cur !== top) await cur.close();
      cur = parent;
      // Only when the parent it went down from was found again: otherwise `name` is not in `cur`.
      if (stack.length === depth) await visitor.leave?.(cur, level.name);
    }
  } finally {
    if (cur !== top) await cur.close();
  }
}

/** The folder of the last level of `stack` (the parent of `cur`); drops the levels no longer found. */
async function climb(top: Dir, cur: Dir, stack: Level[]): Promise<Dir> {
  if (stack.length === 1) return top;
  const want = stack[stack.length - 1] as Level;
  const rel = stack.slice(1).reduce((r, l) => (r === "/" ? `/${l.name}` : `${r}/${l.name}`), top.rel);
  const up = await Dir.open(`${cur.self}/..`, rel, false).catch(() => undefined);
  if (up) {
    const st = await up.stat().catch(() => undefined);
    if (st && st.dev === want.dev && st.ino === want.ino) return up;
    await up.close();
  }
  // Moved since it was entered: found again by name from the top, every step beneath it.
  let dir = top;
  for (let i = 1; i < stack.length; i++) {
    const level = stack[i] as Level;
    const next = await dir.sub(level.name).catch(async (err) => {
      if (err instanceof BeneathError) return undefined;
      if (dir !== top) await dir.close();
      throw err;
    });
    if (!next) {
      stack.length = i;
      return dir;
    }
    if (dir !== top) await dir.close();
    dir = next;
    // Whatever is under that name now is what the rest of the walk is in.
    const st = await dir.stat().catch(async (err) => {
      await dir.close();
      throw err;
    });
    level.dev = st.dev;
    level.ino = st.ino;
  }
  return dir;
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
 * Removes `path` and everything under it (nothing when it is missing). The folder holding it
 * is the operator's and is opened as any path; below that, Dir.removeTree: a folder of it
 * that someone swaps for a link is unlinked as a link, never followed.
 */
export async function removePath(path: string): Promise<void> {
  let parent: Dir;
  try {
    parent = await openBeneath(dirname(path), []);
  } catch (err) {
    if (err instanceof BeneathError && err.kind === "not-found") return;
    throw err;
  }
  try {
    await parent.removeTree(basename(path));
  } finally {
    await parent.close();
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
