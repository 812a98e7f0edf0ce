import { chmod, mkdir, rename, rm, rmdir, stat, statfs, truncate } from "node:fs/promises";
import { dirname, join } from "node:path";
import { removePath } from "../../util/beneath.js";
import { renameDurable } from "../../util/durable-write.js";
import { exec } from "../../util/exec.js";
import type { VolumeBackend } from "./backend.js";

/**
 * Volumes as ext4 filesystems in sparse image files (DATA/volumes/<id>/disk.img), loop-mounted
 * at DATA/volumes/<id>/data. The filesystem's size is the limit, so writes from inside a
 * sandbox hit ENOSPC like on a full disk, which a plain folder cannot do. Needs root, loop
 * devices and mkfs.ext4; a mount survives a server crash and is reused at the next start.
 */
export class Ext4ImageBackend implements VolumeBackend {
  readonly name = "ext4";

  constructor(
    private readonly dir: (id: string) => string,
    private readonly sizeBytes: number,
  ) {}

  root(id: string): string {
    return join(this.dir(id), "data");
  }

  private image(id: string): string {
    return join(this.dir(id), "disk.img");
  }

  async create(id: string): Promise<void> {
    const img = this.image(id);
    if (!(await stat(img).catch(() => undefined))) {
      await mkdir(this.dir(id), { recursive: true });
      const tmp = `${img}.tmp`;
      await rm(tmp, { force: true });
      await exec("truncate", ["-s", String(this.sizeBytes), tmp]).catch(() => truncate(tmp, this.sizeBytes));
      // -m 0: no blocks reserved for root, the whole size is the user's.
      await exec("mkfs.ext4", ["-q", "-F", "-m", "0", "-E", "root_owner=0:0", tmp], { timeoutMs: 60_000 });
      await renameDurable(tmp, img);
    }
    await this.attach(id, true);
  }

  /** Mounts the image unless it already is (after a crash the mount outlives the server). */
  async attach(id: string, fresh = false): Promise<void> {
    const root = this.root(id);
    await mkdir(root, { recursive: true });
    if (!(await isMountPoint(root))) {
      await exec("mount", ["-o", "loop,nodev,nosuid", this.image(id), root], { timeoutMs: 60_000 });
    }
    if (fresh) {
      await chmod(root, 0o777);
      // mkfs's lost+found would show up in every listing of a new volume.
      await rmdir(join(root, "lost+found")).catch(() => undefined);
    }
  }

  /** Unmounts (lazily if a gofer still holds it: the kernel finishes once it lets go). */
  async detach(id: string): Promise<void> {
    const root = this.root(id);
    if (!(await isMountPoint(root))) return;
    const r = await exec("umount", [root], { allowFail: true, timeoutMs: 60_000 });
    if (r.code !== 0) await exec("umount", ["-l", root], { timeoutMs: 60_000 });
  }

  /** What the filesystem has left: no walk, and exactly what a sandbox could still write. */
  async free(id: string): Promise<number> {
    const st = await statfs(this.root(id));
    return st.bavail * st.bsize;
  }

  async remove(id: string): Promise<void> {
    await this.detach(id);
    const gone = `${this.dir(id)}.deleting`;
    await rename(this.dir(id), gone).catch(() => undefined);
    // Unmounted, its data folder should be empty; removed by descriptor all the same, like any
    // folder a sandbox may have written links into.
    await removePath(gone);
  }
}

/** A folder another filesystem is mounted on (its device differs from its parent's). */
async function isMountPoint(path: string): Promise<boolean> {
  const [a, b] = await Promise.all([stat(path).catch(() => undefined), stat(dirname(path)).catch(() => undefined)]);
  return !!a && !!b && a.dev !== b.dev;
}
