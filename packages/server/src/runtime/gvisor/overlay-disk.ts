import { closeSync, ftruncateSync, openSync, rmSync } from "node:fs";
import { exec } from "../../util/exec.js";

/** Below this the filesystem's own metadata would eat a noticeable part of the size. */
const MIN_DISK_MB = 16;

/**
 * A sized disk for one start of a sandbox's writable layer. runsc keeps the overlay's upper
 * layer (file data) in a "filestore" file it creates in `--overlay2=root:dir=DIR`; with a
 * sparse ext4 image of the sandbox's disk size mounted at DIR, a write past that size fails
 * inside the sandbox with ENOSPC (gVisor passes the failed fallocate through) and the sandbox
 * goes on. A checkpoint carries the layer's contents, not the filestore, so pause, fork and
 * snapshot need nothing from this disk: every start gets a fresh, empty one.
 *
 * The image is only formatted here; it is mounted inside the private mount namespace runsc
 * is started in (see Runsc.detached), so the mount lives and dies with the sandbox and no
 * other sandbox's namespace copy can pin its loop device.
 */
export async function prepareOverlayDisk(image: string, sizeMB: number): Promise<void> {
  rmSync(image, { force: true });
  const fd = openSync(image, "w", 0o600);
  try {
    ftruncateSync(fd, Math.max(MIN_DISK_MB, sizeMB) * 2 ** 20);
  } finally {
    closeSync(fd);
  }
  // The filestore is one file: 16 inodes keep the inode tables (and mkfs) small. No journal
  // and no reserved blocks: the contents are scratch, and the whole size is the sandbox's.
  await exec("mkfs.ext4", ["-q", "-F", "-N", "16", "-O", "^has_journal", "-m", "0", "-E", "nodiscard", image], {
    timeoutMs: 30_000,
  });
}
