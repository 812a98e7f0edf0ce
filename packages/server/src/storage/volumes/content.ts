import { randomBytes } from "node:crypto";
import { constants, createReadStream, createWriteStream, type ReadStream, type Stats } from "node:fs";
import { chmod, chown, lstat, mkdir, open, readdir, readlink, realpath, rm } from "node:fs/promises";
import { join, posix } from "node:path";
import type { Readable } from "node:stream";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { VolumeEntryStat } from "@aenv/protocol";
import { ConflictError, InvalidRequestError, NotFoundError, TooLargeError } from "../../errors.js";
import { renameDurable } from "../../util/durable-write.js";
import type { VolumeBackend } from "./backend.js";
import { fdTarget, hostPath, isWithin, parseVolumePath, type VolumePath } from "./safe-path.js";

export interface Ownership {
  uid?: number;
  gid?: number;
  mode?: number;
}

const FILE_MODE = 0o644;
const DIR_MODE = 0o755;

function typeOf(st: Stats): VolumeEntryStat["type"] {
  if (st.isSymbolicLink()) return "symlink";
  if (st.isDirectory()) return "directory";
  if (st.isFile()) return "file";
  return "unknown";
}

async function statEntry(host: string, rel: string): Promise<VolumeEntryStat> {
  const st = await lstat(host).catch(() => undefined);
  if (!st) throw new NotFoundError(`path ${rel} not found`);
  const e: VolumeEntryStat = {
    name: rel === "/" ? "" : posix.basename(rel),
    path: rel,
    type: typeOf(st),
    size: st.size,
    mode: st.mode & 0o7777,
    uid: st.uid,
    gid: st.gid,
    atime: st.atime.toISOString(),
    mtime: st.mtime.toISOString(),
    ctime: st.ctime.toISOString(),
  };
  if (st.isSymbolicLink()) e.target = await readlink(host).catch(() => "");
  return e;
}

async function applyOwnership(host: string, o: Ownership, defaultMode: number): Promise<void> {
  await chmod(host, o.mode ?? defaultMode);
  if (o.uid !== undefined || o.gid !== undefined) await chown(host, o.uid ?? -1, o.gid ?? -1);
}

/**
 * The volume content API over one backend: list, stat, make folders, read, write, change
 * metadata, remove. Every path goes through safe-path.ts; writes through the API are held to
 * the per-volume size limit (one upload at a time per volume, so the check is exact).
 */
export class VolumeContent {
  private readonly writeLocks = new Map<string, Promise<unknown>>();

  constructor(
    private readonly backend: VolumeBackend,
    private readonly maxBytes: number,
  ) {}

  private root(id: string): string {
    return this.backend.root(id);
  }

  async stat(id: string, raw: string): Promise<VolumeEntryStat> {
    const vp = parseVolumePath(raw);
    const { path } = await hostPath(this.root(id), vp);
    return statEntry(path, vp.rel);
  }

  async list(id: string, raw: string, depth = 1): Promise<VolumeEntryStat[]> {
    const vp = parseVolumePath(raw);
    const { path } = await hostPath(this.root(id), vp);
    const st = await lstat(path).catch(() => undefined);
    if (!st?.isDirectory()) throw new NotFoundError(`directory ${vp.rel} not found`);
    const out: VolumeEntryStat[] = [];
    const walk = async (host: string, rel: string, left: number) => {
      for (const name of (await readdir(host)).sort()) {
        const childRel = rel === "/" ? `/${name}` : `${rel}/${name}`;
        const e = await statEntry(join(host, name), childRel).catch(() => undefined);
        if (!e) continue;
        out.push(e);
        // Links are listed, never descended into.
        if (e.type === "directory" && left > 1) await walk(join(host, name), childRel, left - 1);
      }
    };
    await walk(path, vp.rel, Math.max(1, depth));
    return out;
  }

  async makeDir(id: string, raw: string, o: Ownership & { force?: boolean }): Promise<VolumeEntryStat> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) {
      if (o.force) return statEntry(await hostPath(this.root(id), vp).then((h) => h.path), "/");
      throw new ConflictError("path / already exists");
    }
    if (o.force) await this.makeParents(id, vp);
    const { path } = await hostPath(this.root(id), vp);
    const st = await lstat(path).catch(() => undefined);
    if (st) {
      if (o.force && st.isDirectory()) return statEntry(path, vp.rel);
      throw new ConflictError(`path ${vp.rel} already exists`);
    }
    await mkdir(path);
    await applyOwnership(path, o, DIR_MODE);
    return statEntry(path, vp.rel);
  }

  /** mkdir -p of vp's parents, one checked component at a time. */
  private async makeParents(id: string, vp: VolumePath): Promise<void> {
    for (let i = 1; i < vp.parts.length; i++) {
      const sub = parseVolumePath(`/${vp.parts.slice(0, i).join("/")}`);
      const { path } = await hostPath(this.root(id), sub);
      const st = await lstat(path).catch(() => undefined);
      if (!st) {
        await mkdir(path).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== "EEXIST") throw err;
        });
        await chmod(path, DIR_MODE);
      } else if (st.isSymbolicLink()) {
        throw new InvalidRequestError(`path ${sub.rel} is a symlink; links are not followed`);
      } else if (!st.isDirectory()) {
        throw new ConflictError(`${sub.rel} is not a directory`);
      }
    }
  }

  async setMetadata(id: string, raw: string, o: Ownership): Promise<VolumeEntryStat> {
    const vp = parseVolumePath(raw);
    const { path } = await hostPath(this.root(id), vp);
    const st = await lstat(path).catch(() => undefined);
    if (!st) throw new NotFoundError(`path ${vp.rel} not found`);
    if (st.isSymbolicLink()) throw new InvalidRequestError(`path ${vp.rel} is a symlink; links are not followed`);
    if (o.mode !== undefined) await chmod(path, o.mode);
    if (o.uid !== undefined || o.gid !== undefined) await chown(path, o.uid ?? -1, o.gid ?? -1);
    return statEntry(path, vp.rel);
  }

  /** A file's content as a stream (opened without following a link, checked to be inside). */
  async read(id: string, raw: string): Promise<{ stream: ReadStream; size: number }> {
    const vp = parseVolumePath(raw);
    const { path } = await hostPath(this.root(id), vp);
    // Only regular files are opened: a FIFO a sandbox planted would block the open (and
    // O_NONBLOCK covers one swapped in after this check).
    const pre = await lstat(path).catch(() => undefined);
    if (pre && !pre.isFile() && !pre.isSymbolicLink())
      throw new NotFoundError(`file ${vp.rel} not found (not a regular file)`);
    const flags = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
    const fh = await open(path, flags).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") throw new NotFoundError(`path ${vp.rel} not found`);
      if (err.code === "ELOOP") throw new InvalidRequestError(`path ${vp.rel} is a symlink; links are not followed`);
      throw err;
    });
    try {
      const st = await fh.stat();
      if (!st.isFile()) throw new NotFoundError(`file ${vp.rel} not found (not a regular file)`);
      if (!isWithin(await realpath(this.root(id)), await fdTarget(fh.fd))) {
        throw new InvalidRequestError(`path ${vp.rel} leaves the volume`);
      }
      return { stream: createReadStream("", { fd: fh, autoClose: true }), size: st.size };
    } catch (err) {
      await fh.close();
      throw err;
    }
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
    const { path, parent } = await hostPath(this.root(id), vp);
    const existing = await lstat(path).catch(() => undefined);
    if (existing?.isDirectory()) throw new ConflictError(`path ${vp.rel} is a directory`);
    if (existing?.isSymbolicLink())
      throw new InvalidRequestError(`path ${vp.rel} is a symlink; links are not followed`);
    if (existing && !o.force) throw new ConflictError(`path ${vp.rel} already exists (pass force to overwrite)`);
    const room = (await this.backend.free(id)) + (existing?.size ?? 0);
    if (o.declaredLength !== undefined && o.declaredLength > room) {
      throw new TooLargeError(`volume size limit of ${this.maxBytes} bytes: ${o.declaredLength} bytes do not fit`);
    }
    const tmp = join(parent, `.aenv-upload-${randomBytes(6).toString("hex")}`);
    let written = 0;
    const limit = new Transform({
      transform: (chunk: Buffer, _enc, cb) => {
        written += chunk.length;
        if (written > room) cb(new TooLargeError(`volume size limit of ${this.maxBytes} bytes reached`));
        else cb(null, chunk);
      },
    });
    try {
      await pipeline(body, limit, createWriteStream(tmp, { flags: "wx", mode: FILE_MODE }));
      await applyOwnership(tmp, o, FILE_MODE);
      await renameDurable(tmp, path);
    } catch (err) {
      await rm(tmp, { force: true });
      if ((err as NodeJS.ErrnoException).code === "ENOSPC") {
        throw new TooLargeError(`volume size limit of ${this.maxBytes} bytes reached (the volume is full)`);
      }
      throw err;
    }
    return statEntry(path, vp.rel);
  }

  async remove(id: string, raw: string): Promise<void> {
    const vp = parseVolumePath(raw);
    if (vp.parts.length === 0) throw new InvalidRequestError("cannot remove the volume root");
    const { path } = await hostPath(this.root(id), vp);
    if (!(await lstat(path).catch(() => undefined))) throw new NotFoundError(`path ${vp.rel} not found`);
    // rm never follows links: a link is removed, not its target.
    await rm(path, { recursive: true, force: true });
  }
}
