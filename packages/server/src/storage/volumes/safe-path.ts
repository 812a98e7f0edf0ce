import { lstat, readlink, realpath } from "node:fs/promises";
import { join, posix, sep } from "node:path";
import { InvalidRequestError, NotFoundError } from "../../errors.js";

/**
 * A path of the content API, checked: `/a/b` is relative to the volume root (a leading slash
 * or none), `..` is refused rather than resolved, and no symlink is ever followed, so nothing
 * outside the volume is reachable even when a sandbox plants links in it.
 */
export interface VolumePath {
  /** Canonical form inside the volume: "/" or "/a/b". */
  rel: string;
  /** Components of rel; empty for the root. */
  parts: string[];
}

export function parseVolumePath(raw: string): VolumePath {
  if (raw.includes("\0")) throw new InvalidRequestError("path contains a NUL byte");
  const parts = raw.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw new InvalidRequestError(`path '${raw}' leaves the volume ('..' is not allowed)`);
  for (const p of parts) if (p.length > 255) throw new InvalidRequestError("a path component is over 255 bytes");
  return { rel: `/${parts.join("/")}`, parts };
}

export const isWithin = (root: string, p: string) => p === root || p.startsWith(root + sep);

/**
 * The host path of `vp`'s parent folder, resolved without following any symlink inside the
 * volume: every component is lstat'ed, and the result is checked against the real root.
 * Throws NotFound when a component is missing, InvalidRequest when one is a symlink or a file.
 */
export async function hostParent(root: string, vp: VolumePath): Promise<string> {
  const realRoot = await realpath(root);
  let cur = realRoot;
  for (const part of vp.parts.slice(0, -1)) {
    cur = join(cur, part);
    const st = await lstat(cur).catch(() => undefined);
    if (!st) throw new NotFoundError(`path ${posix.dirname(vp.rel)} not found`);
    if (st.isSymbolicLink())
      throw new InvalidRequestError(`path ${vp.rel} goes through a symlink; links are not followed`);
    if (!st.isDirectory()) throw new InvalidRequestError(`${cur.slice(realRoot.length)} is not a directory`);
  }
  // A component swapped for a link while we walked is caught here.
  const real = await realpath(cur);
  if (!isWithin(realRoot, real)) throw new InvalidRequestError(`path ${vp.rel} leaves the volume`);
  return real;
}

/** Host path of `vp` itself (its last component not followed), plus its parent's. */
export async function hostPath(root: string, vp: VolumePath): Promise<{ path: string; parent: string }> {
  if (vp.parts.length === 0) {
    const real = await realpath(root);
    return { path: real, parent: real };
  }
  const parent = await hostParent(root, vp);
  return { path: join(parent, vp.parts[vp.parts.length - 1] as string), parent };
}

/** Where an open descriptor really points: used to check an open file stayed inside the volume. */
export async function fdTarget(fd: number): Promise<string> {
  return readlink(`/proc/self/fd/${fd}`);
}
