import { closeSync, ftruncateSync, mkdirSync, openSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
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
export async function formatOverlayDisk(image: string, sizeMB: number): Promise<void> {
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

/**
 * Sandbox disks formatted ahead of time. mkfs takes 20-60 ms here, on the path of every boot,
 * restore and fork child; a disk formatted while the host had nothing else to do is a rename
 * away. `ahead` per size wait in `dir` (sparse: ~1 MiB each), refilled one at a time behind
 * each take; a burst beyond them formats on its own path. `dir` must be on the
 * sandboxes' filesystem (a rename); it is emptied at start (a format cut short may be there).
 */
export class OverlayDisks {
  private readonly ready = new Map<number, string[]>();
  private readonly pending = new Map<number, number>();
  private chain: Promise<void> = Promise.resolve();
  private seq = 0;
  private closed = false;
  /** Disks taken ready, disks formatted on a start's path (read by the tests). */
  readonly counts = { ahead: 0, inline: 0 };

  constructor(
    private readonly dir: string,
    private readonly log: Logger,
    private readonly ahead = 2,
  ) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** A freshly formatted disk of sizeMB at image (replacing what was there). */
  async take(image: string, sizeMB: number): Promise<void> {
    const mb = Math.max(MIN_DISK_MB, sizeMB);
    const disk = this.ready.get(mb)?.shift();
    let taken = false;
    if (disk) {
      try {
        renameSync(disk, image);
        taken = true;
      } catch (err) {
        rmSync(disk, { force: true });
        // Another filesystem than the sandbox's (EXDEV): no rename will ever work from here.
        if ((err as NodeJS.ErrnoException).code === "EXDEV") this.closed = true;
        this.log.warn({ err, disk }, "sandbox disk formatted ahead unusable; formatting one now");
      }
    }
    if (taken) this.counts.ahead++;
    else {
      await formatOverlayDisk(image, mb);
      this.counts.inline++;
    }
    // After this start has gone on: spawning mkfs takes ~10 ms of this thread by itself.
    setImmediate(() => this.refill(mb));
  }

  private refill(mb: number): void {
    const queued = () => (this.ready.get(mb)?.length ?? 0) + (this.pending.get(mb) ?? 0);
    while (!this.closed && queued() < this.ahead) {
      this.pending.set(mb, (this.pending.get(mb) ?? 0) + 1);
      // One format at a time, never rejected (a failed one is logged and missed).
      this.chain = this.chain.then(async () => {
        try {
          if (this.closed) return;
          const disk = join(this.dir, `${mb}-${++this.seq}.img`);
          await formatOverlayDisk(disk, mb);
          if (this.closed) rmSync(disk, { force: true });
          else this.ready.set(mb, [...(this.ready.get(mb) ?? []), disk]);
        } catch (err) {
          this.log.warn({ err, mb }, "sandbox disk not formatted ahead");
        } finally {
          this.pending.set(mb, (this.pending.get(mb) ?? 1) - 1);
        }
      });
    }
  }

  /** Resolves once the formats queued so far (and those a take just asked for) are done. */
  async formatted(): Promise<void> {
    await new Promise((r) => setImmediate(r));
    await this.chain;
  }

  /** Stops refilling once the format under way ends; what is ready stays (removed at next start). */
  async close(): Promise<void> {
    this.closed = true;
    await this.chain;
  }
}
