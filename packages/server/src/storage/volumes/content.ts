import { randomBytes } from "node:crypto";
import { constants, type Stats } from "node:fs";
import { readlink, rename } from "node:fs/promises";
import type { Readable } from "node:stream";
import { ConflictError, InvalidRequestError, NotFoundError, TooLargeError } from "@aenv/edge/errors";
import type { VolumeEntryStat } from "@aenv/protocol";
import { BeneathError, type Dir, withDir, writeStream } from "../../util/beneath.js";
import type { VolumeBackend } from "./backend.js";
import { parseVolumePath, type VolumePath } from "./safe-path.js";

/**
 * Test seams: `resolved` runs once a request's folder is open and before anything is done in
 * it, the moment a racing sandbox would swap a component for a link.
 */
export interface ContentSeams {
  resolved?: (rel: string) => Promise<void> | void;
}

export interface Ownership {
  uid?: number;
  gid?: number;
  mode?: number;
}

const FILE_MODE = 0o644;
const DIR_MODE = 0o755;
const WRITE_NEW = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL;

function typeOf(st: Stats): VolumeEntryStat["type"] {
  if (st.isSymbolicLink()) return "symlink";
  if (st.isDirectory()) return "directory";
  if (st.isFile()) return "file";
  return "unknown";
}

/** BeneathError → the API's typed errors; anything else goes up as it is. */
function apiError(err: unknown): unknown {
  if (!(err instanceof BeneathError)) return err;
  switch (err.kind) {
    case "not-found":
      return new NotFoundError(err.message);
    case "not-directory":
      return new ConflictError(err.message);
    default:
      return new InvalidRequestError(err.message);
  }
}

/** A stat result as the content API shows it. */
function entryFromStat(name: string, path: string, st: Stats): VolumeEntryStat {
  return {
    name,
    path,
    type: typeOf(st),
    size: st.size,
    mode: st.mode & 0o7777,
    uid: st.uid,
    gid: st.gid,
    atime: st.atime.toISOString(),
    mtime: st.mtime.toISOString(),
    ctime: st.ctime.toISOString(),
  };
}

async function entryOf(dir: Dir, name: string): Promise<VolumeEntryStat | undefined> {
  const st = await dir.lstat(name);
  if (!st) return undefined;
  const e = entryFromStat(name, dir.relOf(name), st);
  if (st.isSymbolicLink()) e.target = await readlink(dir.at(name)).catch(() => "");
  return e;
}

async function mustEntry(dir: Dir, name: string): Promise<VolumeEntryStat> {
  const e = await entryOf(dir, name);
  if (!e) throw new NotFoundError(`path ${dir.relOf(name)} not found`);
  return e;
}

async function rootEntry(dir: Dir): Promise<VolumeEntryStat> {
  return entryFromStat("", "/", await dir.stat());
}

const leaf = (vp: VolumePath) => vp.parts[vp.parts.length - 1] as string;

/**
 * The volume content API over one backend: list, stat, make folders, read, write, change
 * metadata, remove. A sandbox that mounts the volume can change it at any moment, so every
 * operation works through descriptors of folders opened beneath the volume root
 * (util/beneath.ts): no link is followed and nothing is checked by name and then used.
 * Writes through the API are held to the per-volume size limit (one upload at a time per
 * volume, so the check is exact).
 */
export class VolumeContent {
  private readonly writeLocks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly backend: VolumeBackend,
    private readonly maxBytes: number,
    private readonly seams: ContentSeams = {},
  ) {}

  /** Runs `fn` in the open folder `parts`; BeneathErrors become API errors. */
  private async inDir<T>(
    id: string,
    parts: readonly string[],
    rel: string,
    fn: (dir: Dir) => Promise<T>,
    createMode?: number,
  ): Promise<T> {
    try {
      return await withDir(
        this.backend.root(id),
        parts,
        async (dir) => {
          await this.seams.resolved?.(rel);
          return fn(dir);
        },
        { createMode },
      );
    } catch (err) {
      throw apiError(err);
    }
  }

  /** Runs `fn` in vp's parent folder, with vp's last component. */
  private inParent<T>(id: string, vp: VolumePath, fn: (dir: Dir, name: string) => Promise<T>, createMode?: number) {
    return this.inDir(id, vp.parts.slice(0, -1), vp.rel, (dir) => fn(dir, leaf(vp)), createMode);
  }

  async stat(id: string, raw: string): Promise<VolumeEntryStat> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) return this.inDir(id, [], "/", rootEntry);
    return this.inParent(id, vp, mustEntry);
  }

  async list(id: string, raw: string, depth = 1): Promise<VolumeEntryStat[]> {
    const vp = parseVolumePath(raw);
    const out: VolumeEntryStat[] = [];
    const walk = async (dir: Dir, left: number): Promise<void> => {
      for (const name of (await dir.entries()).map((e) => e.name).sort()) {
        const e = await entryOf(dir, name).catch(() => undefined);
        if (!e) continue;
        out.push(e);
        // Links are listed, never descended into (sub() refuses them even if swapped in now).
        if (e.type !== "directory" || left <= 1) continue;
        const sub = await dir.sub(name).catch(() => undefined);
        if (!sub) continue;
        try {
          await walk(sub, left - 1);
        } finally {
          await sub.close();
        }
      }
    };
    try {
      await this.inDir(id, vp.parts, vp.rel, (dir) => walk(dir, Math.max(1, depth)));
    } catch (err) {
      if (err instanceof NotFoundError || err instanceof ConflictError || err instanceof InvalidRequestError)
        throw new NotFoundError(`directory ${vp.rel} not found`);
      throw err;
    }
    return out;
  }

  async makeDir(id: string, raw: string, o: Ownership & { force?: boolean }): Promise<VolumeEntryStat> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) {
      if (o.force) return this.stat(id, "/");
      throw new ConflictError("path / already exists");
    }
    return this.inParent(
      id,
      vp,
      async (dir, name) => {
        const st = await dir.lstat(name);
        if (st) {
          if (o.force && st.isDirectory()) return mustEntry(dir, name);
          throw new ConflictError(`path ${vp.rel} already exists`);
        }
        const sub = await dir.subOrCreate(name, o.mode ?? DIR_MODE);
        try {
          if (o.uid !== undefined || o.gid !== undefined) await sub.chown(o.uid ?? -1, o.gid ?? -1);
        } finally {
          await sub.close();
        }
        return mustEntry(dir, name);
      },
      o.force ? DIR_MODE : undefined,
    );
  }

  async setMetadata(id: string, raw: string, o: Ownership): Promise<VolumeEntryStat> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) {
      return this.inDir(id, [], "/", async (dir) => {
        if (o.mode !== undefined) await dir.chmod(o.mode);
        if (o.uid !== undefined || o.gid !== undefined) await dir.chown(o.uid ?? -1, o.gid ?? -1);
        return rootEntry(dir);
      });
    }
    return this.inParent(id, vp, async (dir, name) => {
      await dir.setOwnership(name, o);
      return mustEntry(dir, name);
    });
  }

  /** A file's content as a stream (a regular file of the volume, opened without following a link). */
  async read(id: string, raw: string): Promise<{ stream: Readable; size: number }> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) throw new NotFoundError("file / not found (not a regular file)");
    return this.inParent(id, vp, async (dir, name) => {
      const fh = await dir.openFile(name, constants.O_RDONLY).catch((err: NodeJS.ErrnoException) => {
        if (err.code === "ENOENT") throw new NotFoundError(`path ${vp.rel} not found`);
        if (err.code === "ELOOP") throw new InvalidRequestError(`path ${vp.rel} is a symlink; links are not followed`);
        if (err instanceof BeneathError) throw new NotFoundError(`file ${vp.rel} not found (not a regular file)`);
        throw err;
      });
      const size = (await fh.stat()).size;
      return { stream: fh.createReadStream({ autoClose: true }), size };
    });
  }

  /**
   * Writes a file from a stream: into a temporary file beside it, renamed over the target at
   * the end, so readers never see half a file. Refused with 413 as soon as the volume would
   * pass its size limit.
   */
  async write(
    id: string,
    raw: string,
    body: Readable,
    o: Ownership & { force?: boolean; declaredLength?: number },
  ): Promise<VolumeEntryStat> {
    const prev = this.writeLocks.get(id) ?? Promise.resolve();
    const run = prev.then(
      () => this.writeNow(id, raw, body, o),
      () => this.writeNow(id, raw, body, o),
    );
    this.writeLocks.set(id, run);
    try {
      return await run;
    } finally {
      if (this.writeLocks.get(id) === run) this.writeLocks.delete(id);
    }
  }

  private async writeNow(
    id: string,
    raw: string,
    body: Readable,
    o: Ownership & { force?: boolean; declaredLength?: number },
  ): Promise<VolumeEntryStat> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) throw new InvalidRequestError("cannot write to the volume root");
    return this.inParent(id, vp, async (dir, name) => {
      // What is there now decides the answer; the rename below replaces whatever the name
      // holds by then (a link itself, never its target), inside this folder.
      const existing = await dir.lstat(name);
      if (existing?.isDirectory()) throw new ConflictError(`path ${vp.rel} is a directory`);
      if (existing?.isSymbolicLink())
        throw new InvalidRequestError(`path ${vp.rel} is a symlink; links are not followed`);
      if (existing && !o.force) throw new ConflictError(`path ${vp.rel} already exists (pass force to overwrite)`);
      const room = (await this.backend.free(id)) + (existing?.size ?? 0);
      if (o.declaredLength !== undefined && o.declaredLength > room) {
        throw new TooLargeError(`volume size limit of ${this.maxBytes} bytes: ${o.declaredLength} bytes do not fit`);
      }
      const tmp = `.aenv-upload-${randomBytes(6).toString("hex")}`;
      const fh = await dir.openFile(tmp, WRITE_NEW, FILE_MODE);
      try {
        await writeStream(fh, body, (total) => {
          if (total > room) throw new TooLargeError(`volume size limit of ${this.maxBytes} bytes reached`);
        });
        // Through the descriptor: the temp name may be a link by now, the file is not.
        await fh.chmod(o.mode ?? FILE_MODE);
        if (o.uid !== undefined || o.gid !== undefined) await fh.chown(o.uid ?? -1, o.gid ?? -1);
        await fh.sync();
        await fh.close();
        await rename(dir.at(tmp), dir.at(name));
        await dir.sync();
      } catch (err) {
        await fh.close().catch(() => {});
        await dir.removeTree(tmp).catch(() => {});
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "EISDIR" || code === "ENOTEMPTY") throw new ConflictError(`path ${vp.rel} is a directory`);
        if (code === "ENOSPC") {
          throw new TooLargeError(`volume size limit of ${this.maxBytes} bytes reached (the volume is full)`);
        }
        throw err;
      }
      return mustEntry(dir, name);
    });
  }

  async remove(id: string, raw: string): Promise<void> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) throw new InvalidRequestError("cannot remove the volume root");
    await this.inParent(id, vp, async (dir, name) => {
      if (!(await dir.lstat(name))) throw new NotFoundError(`path ${vp.rel} not found`);
      await dir.removeTree(name);
    });
  }
}
