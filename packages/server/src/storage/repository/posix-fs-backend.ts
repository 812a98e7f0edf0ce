import { randomBytes } from "node:crypto";
import type { Dirent } from "node:fs";
import { link, mkdir, open, readdir, readFile, rename, stat, unlink, writeFile } from "node:fs/promises";
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

const isNotFound = (err: unknown) => (err as NodeJS.ErrnoException)?.code === "ENOENT";

/**
 * posix_fs backend: each key is a file under root. Writes go to a dot-prefixed temp file in the
 * same folder, are fsynced, renamed into place and the folder fsynced, so a crash or a reader
 * on another node (shared filesystem) never sees a partial object; listings skip dot files.
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

  async put(key: string, body: Uint8Array | Readable): Promise<void> {
    const final = this.path(key);
    const dir = dirname(final);
    const tmp = join(dir, `.tmp-${randomBytes(6).toString("hex")}`);
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      const fh = await open(tmp, "w", 0o600);
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
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await writeFile(tmp, body, { mode: 0o600, flush: true });
      // link() fails when the name exists, even on NFS: the whole body or nothing, once.
      await link(tmp, final);
      await fsyncDir(dir);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw new BackendError(`${this.description}: creating ${key} failed: ${describeError(err)}`, { cause: err });
    } finally {
      await unlink(tmp).catch(() => {});
    }
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      return await readFile(this.path(key));
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw new BackendError(`${this.description}: reading ${key} failed: ${describeError(err)}`, { cause: err });
    }
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      const st = await stat(this.path(key));
      return st.isFile() ? { key, size: st.size, modified: st.mtime } : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw new BackendError(`${this.description}: stat ${key} failed: ${describeError(err)}`, { cause: err });
    }
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    // Walk only the folder the prefix lies in, then filter by the full prefix.
    const slash = prefix.lastIndexOf("/");
    const base = slash >= 0 ? prefix.slice(0, slash) : "";
    if (base) assertKey(base);
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
      await unlink(this.path(key));
    } catch (err) {
      if (isNotFound(err)) return;
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
