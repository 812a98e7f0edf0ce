import { randomBytes } from "node:crypto";
import type { Dirent } from "node:fs";
import { constants } from "node:fs";
import { link, lstat, mkdir, open, readdir, rename, unlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { fsyncDir } from "../../util/fsync.js";
import {
  assertKey,
  BackendError,
  BackendUnavailableError,
  describeError,
  type ObjectInfo,
  type RepositoryBackend,
} from "./backend.js";

/** A new temp file: never an existing name, never through a link planted under that name. */
const WRITE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

const isNotFound = (err: unknown) => (err as NodeJS.ErrnoException)?.code === "ENOENT";

/**
 * posix_fs backend: each key is a file under root. Writes go to a dot-prefixed temp file in the
 * same folder, are fsynced, renamed into place and the folder fsynced, so a crash or a reader
 * on another node (shared filesystem) never sees a partial object; listings skip dot files.
 *
 * Whoever can write the folder may plant symlinks in it: no link under root is ever followed
 * (folders on a key's way are lstat'ed, files opened O_NOFOLLOW), so the backend never reads,
 * writes or deletes outside root. The root itself is the operator's and may be a link.
 */
export class PosixFsBackend implements RepositoryBackend {
  readonly description: string;

  constructor(readonly root: string) {
    this.description = `posix_fs ${root}`;
  }

  private path(key: string): string {
    assertKey(key);
    return join(this.root, key);
  }

  /**
   * The path of `key` once every folder between root and it is known to be a real folder
   * (missing ones are fine: mkdir creates real ones). Throws BackendError on a link.
   */
  private async safePath(key: string): Promise<string> {
    const final = this.path(key);
    const parts = key.split("/").slice(0, -1);
    let cur = this.root;
    for (const part of parts) {
      cur = join(cur, part);
      const st = await lstat(cur).catch((err: NodeJS.ErrnoException) => {
        if (isNotFound(err)) return undefined;
        throw err;
      });
      if (!st) break;
      if (!st.isDirectory()) {
        throw new BackendError(
          `${this.description}: ${cur} is a ${st.isSymbolicLink() ? "symlink" : "file"}, not a folder; refusing ${key}`,
        );
      }
    }
    return final;
  }

  async put(key: string, body: Uint8Array | Readable): Promise<void> {
    const final = this.path(key);
    const dir = dirname(final);
    const tmp = join(dir, `.tmp-${randomBytes(6).toString("hex")}`);
    try {
      await this.safePath(key);
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await this.safePath(key); // a link swapped in while mkdir ran
      const fh = await open(tmp, WRITE_NEW, 0o600);
      try {
        if (body instanceof Uint8Array) await fh.writeFile(body);
        else await pipeline(body, fh.createWriteStream({ autoClose: false }));
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, final);
      await fsyncDir(dir);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw new BackendError(`${this.description}: writing ${key} failed: ${describeError(err)}`, { cause: err });
    }
  }

  async putIfAbsent(key: string, body: Uint8Array): Promise<boolean> {
    const final = this.path(key);
    const dir = dirname(final);
    const tmp = join(dir, `.tmp-${randomBytes(6).toString("hex")}`);
    try {
      await this.safePath(key);
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await this.safePath(key);
      await writeFile(tmp, body, { mode: 0o600, flush: true, flag: WRITE_NEW });
      // link() fails when the name exists, even on NFS: the whole body or nothing, once.
      await link(tmp, final);
      await fsyncDir(dir);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "EEXIST" && !(err instanceof BackendError)) return false;
      throw new BackendError(`${this.description}: creating ${key} failed: ${describeError(err)}`, { cause: err });
    } finally {
      await unlink(tmp).catch(() => {});
    }
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      // O_NOFOLLOW: a planted link to a host file fails (ELOOP) instead of being read.
      const fh = await open(await this.safePath(key), constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        return await fh.readFile();
      } finally {
        await fh.close();
      }
    } catch (err) {
      if (isNotFound(err)) return undefined;
      if (err instanceof BackendError) throw err;
      throw new BackendError(`${this.description}: reading ${key} failed: ${describeError(err)}`, { cause: err });
    }
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const st = await lstat(await this.safePath(key));
      return st.isFile() ? { key, size: st.size, modified: st.mtime } : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      if (err instanceof BackendError) throw err;
      throw new BackendError(`${this.description}: stat ${key} failed: ${describeError(err)}`, { cause: err });
    }
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    // Walk only the folder the prefix lies in, then filter by the full prefix.
    const slash = prefix.lastIndexOf("/");
    const base = slash >= 0 ? prefix.slice(0, slash) : "";
    if (base) await this.safePath(`${base}/x`);
    yield* this.walk(base, prefix);
  }

  private async *walk(rel: string, prefix: string): AsyncIterable<ObjectInfo> {
    let entries: Dirent[];
    try {
      entries = await readdir(join(this.root, rel), { withFileTypes: true });
    } catch (err) {
      if (isNotFound(err)) return;
      throw new BackendError(`${this.description}: listing ${rel || "/"} failed: ${describeError(err)}`, {
        cause: err,
      });
    }
    for (const e of entries) {
      if (e.name.startsWith(".")) continue; // temp files of writes in progress
      const key = rel ? `${rel}/${e.name}` : e.name;
      // Dirents are not followed: a symlink is neither a directory nor a file here.
      if (e.isDirectory()) {
        if (prefix.startsWith(`${key}/`) || key.startsWith(prefix)) yield* this.walk(key, prefix);
      } else if (e.isFile() && key.startsWith(prefix)) {
        const info = await this.head(key);
        if (info) yield info;
      }
    }
  }

  async delete(key: string): Promise<void> {
    try {
      await unlink(await this.safePath(key));
    } catch (err) {
      if (isNotFound(err)) return;
      if (err instanceof BackendError) throw err;
      throw new BackendError(`${this.description}: deleting ${key} failed: ${describeError(err)}`, { cause: err });
    }
  }

  async check(): Promise<void> {
    const probe = `.aenv-check-${randomBytes(4).toString("hex")}`;
    try {
      await mkdir(this.root, { recursive: true, mode: 0o700 });
      const fh = await open(join(this.root, probe), "w", 0o600);
      try {
        await fh.writeFile("ok");
        await fh.sync();
      } finally {
        await fh.close();
      }
      await unlink(join(this.root, probe));
    } catch (err) {
      throw new BackendUnavailableError(`repository ${this.description} is not writable: ${describeError(err)}`, {
        cause: err,
      });
    }
  }
}
