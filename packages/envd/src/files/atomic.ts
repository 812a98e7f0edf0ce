/** Crash-safe file replacement: write a temp file in the same directory, then rename over. */
import { createWriteStream, promises as fsp } from "node:fs";
import path from "node:path";
import type { Readable, Transform } from "node:stream";
import { Transform as TransformStream } from "node:stream";
import { pipeline } from "node:stream/promises";
import { chownIfRoot, mkdirpOwned } from "../filesystem/ownership.js";
import { HttpError, statusForErrno } from "../http/respond.js";
import { errnoOf } from "../rpc/errors.js";
import { tempNameFor } from "../tempname.js";
import type { User } from "../users.js";

/** Where a write to `target` should land (follows a symlink at `target`); rejects directories. */
async function finalTarget(target: string): Promise<{ path: string; mode?: number }> {
  let st: Awaited<ReturnType<typeof fsp.lstat>>;
  try {
    st = await fsp.lstat(target);
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return { path: target };
    throw err;
  }
  if (st.isSymbolicLink()) {
    try {
      const real = await fsp.realpath(target);
      return finalTarget(real);
    } catch {
      return { path: target }; // dangling link: replace the link itself
    }
  }
  if (st.isDirectory()) throw new HttpError(400, `path '${target}' is a directory`);
  return { path: target, mode: st.mode & 0o7777 };
}

/**
 * Stream `source` (optionally through `transform`, e.g. gunzip) into `target`.
 * Parents are created and owned by `user`; the file ends up owned by `user`.
 */
export async function writeFileAtomic(
  target: string,
  source: Readable,
  user: User,
  transform?: Transform,
): Promise<void> {
  let tmp: string | undefined;
  try {
    try {
      await mkdirpOwned(path.dirname(target), user);
    } catch (err) {
      const code = errnoOf(err);
      if (code === "EEXIST" || code === "ENOTDIR") {
        throw new HttpError(400, `cannot create parent directory of '${target}': a path component is not a directory`);
      }
      throw err;
    }
    const dest = await finalTarget(target);
    tmp = path.join(path.dirname(dest.path), tempNameFor(path.basename(dest.path)));
    const out = createWriteStream(tmp, { flags: "wx", mode: dest.mode ?? 0o644 });
    try {
      if (transform) await pipeline(source, transform, coalesce(), out);
      else await pipeline(source, coalesce(), out);
    } catch (err) {
      const code = errnoOf(err);
      if (code?.startsWith("Z_") || code === "ERR_PADDING_1" || code === "ERR_PADDING_2") {
        throw new HttpError(400, `invalid compressed body: ${(err as Error).message}`);
      }
      throw err;
    }
    if (dest.mode !== undefined) await fsp.chmod(tmp, dest.mode);
    await chownIfRoot(tmp, user);
    await fsp.rename(tmp, dest.path);
    tmp = undefined;
  } catch (err) {
    if (!source.destroyed) source.resume();
    if (err instanceof HttpError) throw err;
    const code = errnoOf(err);
    const status = statusForErrno(code);
    const msg = err instanceof Error ? err.message : String(err);
    throw new HttpError(
      status === 404 ? 400 : status,
      status === 507 ? `not enough disk space: ${msg}` : `error writing '${target}': ${msg}`,
    );
  } finally {
    if (tmp) await fsp.rm(tmp, { force: true }).catch(() => {});
  }
}

/**
 * Gathers a stream's chunks (socket reads are 64 KiB at most) into 1 MiB writes: each write is
 * a trip through gVisor to the file's backing store, and the fewer the faster.
 */
function coalesce(size = 1 << 20): TransformStream {
  let parts: Buffer[] = [];
  let held = 0;
  return new TransformStream({
    transform(chunk: Buffer, _enc, done) {
      parts.push(chunk);
      held += chunk.length;
      if (held >= size) {
        const all = Buffer.concat(parts, held);
        parts = [];
        held = 0;
        done(null, all);
      } else done();
    },
    flush(done) {
      done(null, held > 0 ? Buffer.concat(parts, held) : undefined);
    },
  });
}
