import { chmod, lstat, mkdir, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { VolumeBackend } from "./backend.js";

/** Volumes as plain folders under DATA/volumes/<id>/data. */
export class LocalDirBackend implements VolumeBackend {
  readonly name = "local";

  constructor(
    private readonly dir: (id: string) => string,
    private readonly maxBytes: number,
  ) {}

  root(id: string): string {
    return join(this.dir(id), "data");
  }

  async create(id: string): Promise<void> {
    const root = this.root(id);
    await mkdir(root, { recursive: true });
    // Any sandbox user (root or the template's default user) may write to a fresh volume.
    await chmod(root, 0o777);
  }

  async attach(): Promise<void> {}

  async detach(): Promise<void> {}

  /** The limit less the files' total size: a walk of the whole volume, as a folder has no quota. */
  async free(id: string): Promise<number> {
    return Math.max(0, this.maxBytes - (await duBytes(this.root(id))));
  }

  async remove(id: string): Promise<void> {
    // Renamed first so a crash mid-removal leaves no half volume under its own name.
    const gone = `${this.dir(id)}.deleting`;
    await rename(this.dir(id), gone).catch(() => undefined);
    await rm(gone, { recursive: true, force: true });
  }
}

/** Bytes of the files under a folder (apparent sizes), never following symlinks; entries that vanish count 0. */
export async function duBytes(path: string): Promise<number> {
  let total = 0;
  const stack = [path];
  while (stack.length) {
    const p = stack.pop() as string;
    const st = await lstat(p).catch(() => undefined);
    if (!st) continue;
    if (st.isFile()) total += st.size;
    if (st.isDirectory()) {
      for (const name of await readdir(p).catch(() => [] as string[])) stack.push(join(p, name));
    }
  }
  return total;
}
