import { chmod, mkdir, rename } from "node:fs/promises";
import { join } from "node:path";
import { BeneathError, type Dir, removePath, walkTree, withDir } from "../../util/beneath.js";
import type { VolumeBackend } from "./backend.js";

/** Test seam: `found` runs when the size walk has found a folder and before it goes in, a racer's moment. */
export interface LocalDirSeams {
  found?: (rel: string) => void;
}

/** Volumes as plain folders under DATA/volumes/<id>/data. */
export class LocalDirBackend implements VolumeBackend {
  readonly name = "local";

  constructor(
    private readonly dir: (id: string) => string,
    private readonly maxBytes: number,
    private readonly seams: LocalDirSeams = {},
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
    return Math.max(0, this.maxBytes - (await duBytes(this.root(id), this.seams.found)));
  }

  async remove(id: string): Promise<void> {
    // Renamed first so a crash mid-removal leaves no half volume under its own name.
    const gone = `${this.dir(id)}.deleting`;
    await rename(this.dir(id), gone).catch(() => undefined);
    // Its data may hold links a sandbox planted and be changing still: removed by descriptor.
    await removePath(gone);
  }
}

/**
 * Bytes of the files under a folder (apparent sizes); entries that vanish count 0. A sandbox
 * with the volume mounted may swap any folder of it for a link while this walks (as root),
 * so the walk goes by descriptors beneath the volume's root (util/beneath.ts): a link is
 * never followed, whenever it appears, and counts 0.
 */
export async function duBytes(path: string, found?: (rel: string) => void): Promise<number> {
  let total = 0;
  const enter = async (dir: Dir): Promise<string[]> => {
    const subs: string[] = [];
    for (const e of await dir.entries().catch(() => [])) {
      const st = await dir.lstat(e.name).catch(() => undefined);
      if (st?.isFile()) total += st.size;
      else if (st?.isDirectory()) {
        found?.(dir.relOf(e.name));
        subs.push(e.name);
      }
    }
    return subs;
  };
  try {
    await withDir(path, [], (root) => walkTree(root, { enter }));
  } catch (err) {
    // No folder, no files.
    if (!(err instanceof BeneathError && err.kind === "not-found")) throw err;
  }
  return total;
}
