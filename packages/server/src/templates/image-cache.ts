import { execFile } from "node:child_process";
import { readdir, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { AtCapacityError } from "@aenv/edge/errors";
import type { Logger } from "pino";
import type { ContentStore, DiskBudget } from "../storage/images/index.js";
import { countImageEviction } from "../telemetry/prometheus.js";

const run = promisify(execFile);

/** A template the cache may drop: started on demand from an image, which can be pulled again. */
export interface Evictable {
  id: string;
  createdAt?: string | undefined;
}

export interface ImageCacheDeps {
  /** The templates folder: everything under it counts against the limit. */
  dir: string;
  /** Layer and config blobs (`<blobDir>/blobs/sha256/*`): a transfer cache, evicted first. */
  blobDir: string;
  content: ContentStore;
  /** 0: no limit (usage is still measured and reported). */
  maxBytes: number;
  /** Templates that may be evicted now (on demand, built, used by no sandbox or snapshot). */
  evictable(): Evictable[];
  /** Removes a template (its tree, warm images and pool); refuses one that came into use. */
  evict(id: string): Promise<void>;
  log: Logger;
}

/** Thrown when an image cannot fit in the cache: everything left is in use. */
export class ImageCacheFullError extends AtCapacityError {}

/**
 * The byte limit of a node's templates folder. What it writes on behalf of images started on
 * demand (layer blobs, file content) asks `room()` first; room is made by dropping layer blobs
 * (nothing needs them once unpacked), then the least recently used on-demand templates no
 * sandbox or snapshot of this node uses, then content no tree links. Usage is measured with
 * `du` (hard links counted once) at start and after each eviction, and counted in between.
 */
export class ImageCache implements DiskBudget {
  private used = 0;
  private reserved = 0;
  private readonly lastUse = new Map<string, number>();
  /** Blobs an unpack in progress reads: never dropped under it. */
  private readonly pinned = new Map<string, number>();
  private making: Promise<void> | undefined;
  private measuring: Promise<void> | undefined;
  private measuredAt = 0;
  /** Told of each layer blob dropped (a cluster's holder index forgets this node). */
  onBlobDropped: ((digest: string) => void) | undefined;

  constructor(private readonly d: ImageCacheDeps) {}

  get maxBytes(): number {
    return this.d.maxBytes;
  }

  /** Usage as last measured and counted; read without a limit, it is measured again at most once a minute. */
  get usedBytes(): number {
    if (this.d.maxBytes === 0 && Date.now() - this.measuredAt > 60_000 && !this.measuring) {
      this.measuring = this.measure().finally(() => {
        this.measuring = undefined;
      });
    }
    return this.used + this.reserved;
  }

  /**
   * The first measurement runs in the background (`du` over a large templates folder takes
   * seconds): the first `room()` waits for it. Without a limit nothing waits for it at all.
   */
  async init(): Promise<void> {
    await this.d.content.init();
    if (this.d.maxBytes > 0) this.measuring = this.measure();
  }

  /** The template was started from: it is the most recently used. */
  touch(id: string): void {
    this.lastUse.set(id, Date.now());
  }

  /** Runs `fn` with these blobs kept. */
  async pinning<T>(digests: string[], fn: () => Promise<T>): Promise<T> {
    for (const d of digests) this.pinned.set(d, (this.pinned.get(d) ?? 0) + 1);
    try {
      return await fn();
    } finally {
      for (const d of digests) {
        const n = (this.pinned.get(d) ?? 1) - 1;
        if (n > 0) this.pinned.set(d, n);
        else this.pinned.delete(d);
      }
    }
  }

  async room(bytes: number): Promise<(added: number) => void> {
    if (this.d.maxBytes > 0) {
      await this.measuring;
      while (this.used + this.reserved + bytes > this.d.maxBytes) {
        // One eviction pass at a time; every waiter checks again after it.
        if (this.making) {
          await this.making;
          continue;
        }
        const pass = this.makeRoom(this.used + this.reserved + bytes - this.d.maxBytes);
        this.making = pass.then(
          () => {},
          () => {},
        );
        const freed = await pass.finally(() => {
          this.making = undefined;
        });
        if (!freed && this.used + this.reserved + bytes > this.d.maxBytes) {
          throw new ImageCacheFullError(
            `the image cache is full: ${this.used + this.reserved} of ${this.d.maxBytes} bytes are in use by ` +
              `templates, images and sandboxes of this node, and ${bytes} more are needed (images.cache_max_bytes)`,
            5,
          );
        }
      }
    }
    this.reserved += bytes;
    let done = false;
    return (added: number) => {
      if (done) return;
      done = true;
      this.reserved -= bytes;
      this.used += added;
    };
  }

  /** Frees at least `need` bytes if it can; false when nothing was left to free. */
  private async makeRoom(need: number): Promise<boolean> {
    let freed = await this.dropBlobs(need);
    if (freed >= need) return true;
    const order = this.d
      .evictable()
      .map((t) => ({ id: t.id, at: this.lastUse.get(t.id) ?? (Date.parse(t.createdAt ?? "") || 0) }))
      .sort((a, b) => a.at - b.at);
    for (const t of order) {
      if (freed >= need) break;
      const before = this.used;
      try {
        await this.d.evict(t.id);
      } catch (err) {
        this.d.log.info({ template: t.id, err: (err as Error).message }, "image cache: template kept");
        continue;
      }
      this.lastUse.delete(t.id);
      await this.d.content.sweep();
      await this.measure();
      countImageEviction("template");
      freed += Math.max(0, before - this.used);
      this.d.log.info({ template: t.id, usedBytes: this.used }, "image cache: template evicted");
    }
    return freed > 0;
  }

  /** Layer blobs, oldest first: each is in the content store once unpacked. */
  private async dropBlobs(need: number): Promise<number> {
    const dir = join(this.d.blobDir, "blobs", "sha256");
    const blobs: Array<{ path: string; digest: string; size: number; at: number }> = [];
    for (const hex of await readdir(dir).catch(() => [] as string[])) {
      const p = join(dir, hex);
      const st = await stat(p).catch(() => null);
      // Manifests and configs are small and say what an image is: kept.
      if (!st?.isFile() || st.size < 1024 * 1024) continue;
      blobs.push({ path: p, digest: `sha256:${hex}`, size: st.blocks * 512, at: st.mtimeMs });
    }
    blobs.sort((a, b) => a.at - b.at);
    let freed = 0;
    for (const b of blobs) {
      if (freed >= need) break;
      if (this.pinned.has(b.digest)) continue;
      await unlink(b.path).catch(() => {});
      this.onBlobDropped?.(b.digest);
      freed += b.size;
      this.used -= b.size;
      countImageEviction("blob");
    }
    return freed;
  }

  /** Bytes under the templates folder, each inode once (`du -x`: warm images elsewhere are not). */
  async measure(): Promise<void> {
    this.measuredAt = Date.now();
    try {
      const { stdout } = await run("du", ["-sx", "--block-size=1", this.d.dir], { maxBuffer: 1 << 20 });
      this.used = Number(stdout.split("\t")[0]) || 0;
    } catch (err) {
      // du exits 1 when a file vanished under it (a sandbox start, a sweep): its sum is still good.
      const out = (err as { stdout?: string }).stdout ?? "";
      const n = Number(out.split("\t")[0]);
      if (Number.isFinite(n) && n > 0) this.used = n;
      else this.d.log.warn({ err }, "image cache: usage not measured");
    }
  }
}
