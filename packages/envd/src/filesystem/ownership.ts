/** mkdir -p that chowns every directory it creates to the user. */
import { promises as fsp } from "node:fs";
import path from "node:path";
import type { User } from "../users.js";

export async function chownIfRoot(p: string, user: User, follow = true): Promise<void> {
  if (process.getuid?.() !== 0) return;
  try {
    if (follow) await fsp.chown(p, user.uid, user.gid);
    else await fsp.lchown(p, user.uid, user.gid);
  } catch {
    // best effort (read-only or foreign filesystems)
  }
}

/** Create `dir` and its missing parents; new directories are owned by `user`. Returns whether `dir` was created. */
export async function mkdirpOwned(dir: string, user: User): Promise<boolean> {
  const first = await fsp.mkdir(dir, { recursive: true, mode: 0o755 });
  if (first === undefined) return false;
  // chown from the first created directory down to `dir`
  const rel = path.relative(first, dir);
  let cur = first;
  await chownIfRoot(cur, user);
  for (const part of rel ? rel.split(path.sep) : []) {
    cur = path.join(cur, part);
    await chownIfRoot(cur, user);
  }
  return true;
}
