import { randomBytes } from "node:crypto";
import type { Dirent } from "node:fs";
import { constants } from "node:fs";
import { link, mkdir, rename, unlink } from "node:fs/promises";
import type { Readable } from "node:stream";
import { BeneathError, type Dir, openBeneath, withDir, writeStream } from "../../util/beneath.js";
import {
  assertKey,
  BackendError,
  BackendUnavailableError,
  describeError,
  type ObjectInfo,
  type RepositoryBackend,
} from "./backend.js";

/** A new temp file: never an existing name, never through a link planted under that name. */
const WRITE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL;

const isNotFound = (err: unknown) =>
  (err as NodeJS.ErrnoException)?.code === "ENOENT" || (err instanceof BeneathError && err.kind === "not-found");

/**
 * Test seam: `resolved` runs once a key's folder is open (for check(), the root, with the
 * probe's name), the moment a racing writer would swap it.
 */
export interface PosixFsSeams {
  resolved?: (key: string) => Promise<void> | void;
}

const tempName = () => `.tmp-${randomBytes(6).toString("hex")}`;

/**
 * posix_fs backend: each key is a file under root. Writes go to a dot-prefixed temp file in the
 * same folder, are fsynced, renamed into place and the folder fsynced, so a crash or a reader
 * on another node (shared filesystem) never sees a partial object; listings skip dot files.
 *
 * Whoever can write the folder may plant symlinks in it and swap folders while we work: every
 * operation goes through descriptors of folders opened beneath root (util/beneath.ts), so no
 * link under root is followed and nothing outside it is read, written or deleted. The root
 * itself is the operator's and may be a link.
 */
export class PosixFsBackend implements RepositoryBackend {
  readonly description: string;

  constructor(
    readonly root: string,
    private readonly seams: PosixFsSeams = {},
  ) {
    this.description = `posix_fs ${root}`;
  }

  /** Runs `fn` in the open folder of `key` with its file name; BackendErrors name the key. */
  private async inFolder<T>(
    key: string,
    what: string,
    fn: (dir: Dir, name: string) => Promise<T>,
    create = false,
  ): Promise<T> {
    assertKey(key);
    const parts = key.split("/");
    const name = parts.pop() as string;
    try {
      // The root is the operator's (it may be a link, and a write creates it like any folder).
      if (create) await mkdir(this.root, { recursive: true, mode: 0o700 });
      return await withDir(
        this.root,
        parts,
        async (dir) => {
          await this.seams.resolved?.(key);
          return fn(dir, name);
        },
        create ? { createMode: 0o700 } : {},
      );
    } catch (err) {
      if (err instanceof BackendError) throw err;
      if (err instanceof BeneathError && err.kind !== "not-found") {
        throw new BackendError(`${this.description}: refusing ${key}: ${err.message}`, { cause: err });
      }
      throw new BackendError(`${this.description}: ${what} ${key} failed: ${describeError(err)}`, { cause: err });
    }
  }

  async put(key: string, body: Uint8Array | Readable): Promise<void> {
    await this.inFolder(
      key,
      "writing",
      async (dir, name) => {
        const tmp = tempName();
        try {
          const fh = await dir.openFile(tmp, WRITE_NEW, 0o600);
          try {
            if (body instanceof Uint8Array) await fh.writeFile(body);
            else await writeStream(fh, body);
            await fh.sync();
          } finally {
            await fh.close();
          }
          await rename(dir.at(tmp), dir.at(name));
          await dir.sync();
        } catch (err) {
          await unlink(dir.at(tmp)).catch(() => {});
          throw err;
        }
      },
      true,
    );
  }

  async putIfAbsent(key: string, body: Uint8Array): Promise<boolean> {
    return this.inFolder(
      key,
      "creating",
      async (dir, name) => {
        const tmp = tempName();
        try {
          const fh = await dir.openFile(tmp, WRITE_NEW, 0o600);
          try {
            await fh.writeFile(body);
            await fh.sync();
          } finally {
            await fh.close();
          }
          // link() fails when the name exists, even on NFS: the whole body or nothing, once.
          await link(dir.at(tmp), dir.at(name));
          await dir.sync();
          return true;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
          throw err;
        } finally {
          await unlink(dir.at(tmp)).catch(() => {});
        }
      },
      true,
    );
  }

  async get(key: string): Promise<Buffer | undefined> {
    try {
      return await this.inFolder(key, "reading", async (dir, name) => {
        // O_NOFOLLOW: a planted link to a host file fails (ELOOP) instead of being read.
        const fh = await dir.openFile(name, constants.O_RDONLY);
        try {
          return await fh.readFile();
        } finally {
          await fh.close();
        }
      });
    } catch (err) {
      if (isNotFound((err as Error).cause)) return undefined;
      throw err;
    }
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    try {
      return await this.inFolder(key, "stat", async (dir, name) => {
        const st = await dir.lstat(name);
        return st?.isFile() ? { key, size: st.size, modified: st.mtime } : undefined;
      });
    } catch (err) {
      if (isNotFound((err as Error).cause)) return undefined;
      throw err;
    }
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    // Walk only the folder the prefix lies in, then filter by the full prefix.
    const slash = prefix.lastIndexOf("/");
    const base = slash >= 0 ? prefix.slice(0, slash) : "";
    if (base) assertKey(base);
    let dir: Dir;
    try {
      dir = await openBeneath(this.root, base ? base.split("/") : []);
    } catch (err) {
      if (isNotFound(err)) return;
      throw new BackendError(`${this.description}: listing ${base || "/"} failed: ${describeError(err)}`, {
        cause: err,
      });
    }
    try {
      yield* this.walk(dir, base, prefix);
    } finally {
      await dir.close();
    }
  }

  private async *walk(dir: Dir, rel: string, prefix: string): AsyncIterable<ObjectInfo> {
    let entries: Dirent[];
    try {
      entries = await dir.entries();
    } catch (err) {
      throw new BackendError(`${this.description}: listing ${rel || "/"} failed: ${describeError(err)}`, {
        cause: err,
      });
    }
    for (const e of entries) {
      if (e.name.startsWith(".")) continue; // temp files of writes in progress
      const key = rel ? `${rel}/${e.name}` : e.name;
      // Dirents are not followed: a symlink is neither a directory nor a file here.
      if (e.isDirectory()) {
        if (!(prefix.startsWith(`${key}/`) || key.startsWith(prefix))) continue;
        const sub = await dir.sub(e.name).catch(() => undefined);
        if (!sub) continue; // swapped for a link or gone since the listing
        try {
          yield* this.walk(sub, key, prefix);
        } finally {
          await sub.close();
        }
      } else if (e.isFile() && key.startsWith(prefix)) {
        const st = await dir.lstat(e.name).catch(() => undefined);
        if (st?.isFile()) yield { key, size: st.size, modified: st.mtime };
      }
    }
  }

  async delete(key: string): Promise<void> {
    try {
      await this.inFolder(key, "deleting", async (dir, name) => {
        await unlink(dir.at(name));
      });
    } catch (err) {
      if (isNotFound((err as Error).cause)) return;
      throw err;
    }
  }

  async check(): Promise<void> {
    const probe = `.aenv-check-${randomBytes(4).toString("hex")}`;
    try {
      await mkdir(this.root, { recursive: true, mode: 0o700 });
      // A new file in the open root (O_EXCL, no link followed): a writer of the folder who
      // plants a link under the probe's name makes the check fail, never write elsewhere.
      await withDir(this.root, [], async (dir) => {
        await this.seams.resolved?.(probe);
        const fh = await dir.openFile(probe, WRITE_NEW, 0o600);
        try {
          await fh.writeFile("ok");
          await fh.sync();
        } finally {
          await fh.close();
        }
        await unlink(dir.at(probe));
      });
    } catch (err) {
      throw new BackendUnavailableError(`repository ${this.description} is not writable: ${describeError(err)}`, {
        cause: err,
      });
    }
  }
}
