import { randomBytes } from "node:crypto";
import { type FileHandle, mkdir, open, readFile, rename, rm, rmdir } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { freshSingleFlight } from "@aenv/edge/fresh";
import { countRepositoryUpload } from "../../telemetry/prometheus.js";
import { forEachLimit } from "../../util/concurrency.js";
import { fsyncDir } from "../../util/fsync.js";
import { readFully } from "../../util/read-fully.js";
import { announce, announced, waitFor, withdraw } from "./announcements.js";
import type { RepositoryBackend } from "./backend.js";
import { type CacheCounters, ChunkCache } from "./chunk-cache.js";
import { chunkDir } from "./chunk-dir.js";
import { ChunkFetcher, inBatches } from "./chunk-fetch.js";
import type { ChunkPeers } from "./chunk-peers.js";
import { claim, claimOf } from "./claims.js";
import { collectGarbage, type GcOptions, type GcResult } from "./gc.js";
import { GcBatcher } from "./gc-batch.js";
import { sha256Fair } from "./hash.js";
import { assertId, CHUNK_BYTES, chunkKey, idOfManifestKey, MANIFESTS, manifestKey } from "./layout.js";
import { activeGcLocks, Lease } from "./leases.js";
import { LocalChunks, type LocalPiece } from "./local-chunks.js";
import {
  type Announcement,
  type ChunkHolder,
  type ChunkRef,
  CommitError,
  type CommitStats,
  type Manifest,
  type ManifestFile,
  SnapshotNotFoundError,
  type SnapshotRepository,
} from "./repository.js";
import type { RepositoryKey } from "./signing.js";
import { checkManifest, UntrustedManifestError } from "./trust.js";
import { compressMany } from "./zstd.js";

/** Seams for tests that need to interleave a commit and a GC deterministically. */
export interface RepositoryHooks {
  /** commit: the lease is written; next it looks for running GCs. */
  afterLease?(id: string): Promise<void> | void;
  /** commit: a live GC lock was seen; the commit polls until it is gone. */
  waitingForGc?(id: string): Promise<void> | void;
  /** commit: existence checks done (`missing` will be uploaded, the rest reused). */
  afterExistenceCheck?(id: string, missing: readonly string[]): Promise<void> | void;
  /** gc: the lock is visible and leases are read; manifests come next. */
  gcAfterLeases?(): Promise<void> | void;
}

export interface RepositoryOptions {
  /** Node-local chunk cache; default none (every materialize fetches everything). */
  cache?: ChunkCache;
  /** zstd level for new chunks (default 3). */
  compressionLevel?: number;
  /** Chunks uploaded, fetched or checked in parallel (default 8). */
  concurrency?: number;
  /** Put the chunks of a commit into the cache as well, so a local restore fetches nothing (default true). */
  cacheOnCommit?: boolean;
  /** delete(id) collects that manifest's chunks right away (default true). */
  gcOnDelete?: boolean;
  /** Grace period of the GC that delete(id) runs, and default for gc() (default 0). */
  gcGraceMs?: number;
  /** A commit's lease counts for this long since its last refresh (default 6 h). */
  leaseTtlMs?: number;
  /** A GC lock counts for this long; a GC stops deleting before it runs out (default 15 min). */
  gcLockTtlMs?: number;
  /** How often a commit waiting for a GC looks again (default 500 ms). */
  gcPollMs?: number;
  hooks?: RepositoryHooks;
  /** A manifest was refused (see trust.ts); called once per entry and reason, for the log. */
  onUntrusted?: (err: UntrustedManifestError) => void;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const manifestOf = (id: string, files: ManifestFile[], meta: object): Manifest => ({
  version: 2,
  id,
  createdAt: new Date().toISOString(),
  chunkSize: CHUNK_BYTES,
  compression: "zstd",
  files,
  meta: { ...meta },
});

/**
 * The snapshot repository over a backend: files cut into content-defined chunks (cdc.ts,
 * ≤ 4 MiB) named by the sha256 of their bytes, stored once as zstd frames, one manifest per id
 * written last; restores go through a bounded node-local cache that fetches only missing chunks.
 */
export class ChunkRepository implements SnapshotRepository {
  /** list(), coalesced; never older than the call (see @aenv/edge/fresh.ts). */
  readonly listFresh: () => Promise<Manifest[]> = freshSingleFlight(() => this.list());
  readonly cache: ChunkCache;
  private readonly level: number;
  private readonly concurrency: number;
  private readonly cacheOnCommit: boolean;
  private readonly gcOnDelete: boolean;
  private readonly gcGraceMs: number;
  private readonly leaseTtlMs: number;
  private readonly gcLockTtlMs: number;
  private readonly gcPollMs: number;
  private readonly hooks: RepositoryHooks;
  /** Chunks of deleted manifests, collected in batches. */
  private readonly freed = new GcBatcher((only) => this.gc({ only }));
  private readonly onUntrusted: (err: UntrustedManifestError) => void;
  private readonly reported = new Set<string>();
  private readonly fetcher: ChunkFetcher;
  private peers: ChunkPeers | undefined;
  /** Chunks of what this node committed or restored, where they are on its disk (for peers). */
  private readonly local = new LocalChunks();

  constructor(
    readonly backend: RepositoryBackend,
    /** Seals what this node writes and checks what it reads (signing.ts). */
    private readonly key: RepositoryKey,
    opts: RepositoryOptions = {},
  ) {
    this.cache = opts.cache ?? new ChunkCache({ dir: "", maxBytes: 0 });
    this.level = opts.compressionLevel ?? 3;
    this.concurrency = opts.concurrency ?? 16;
    this.cacheOnCommit = opts.cacheOnCommit ?? true;
    this.gcOnDelete = opts.gcOnDelete ?? true;
    this.gcGraceMs = opts.gcGraceMs ?? 0;
    this.leaseTtlMs = opts.leaseTtlMs ?? 6 * 3600_000;
    this.gcLockTtlMs = opts.gcLockTtlMs ?? 15 * 60_000;
    this.gcPollMs = opts.gcPollMs ?? 500;
    this.hooks = opts.hooks ?? {};
    this.onUntrusted = opts.onUntrusted ?? (() => {});
    this.fetcher = new ChunkFetcher(backend, this.cache, this.concurrency);
  }

  /**
   * The cluster's other nodes as a source of chunks (cluster.p2p): restores ask them before
   * the backend, and this node tells them which manifests' chunks its cache holds.
   */
  usePeers(peers: ChunkPeers): void {
    this.peers = peers;
    this.fetcher.usePeers(peers);
  }

  /**
   * A chunk's bytes for a peer: from the chunk cache or where a committed or restored
   * manifest left it on this node's disk. Unverified here: the peer checks the digest.
   */
  async chunkForPeer(sha: string): Promise<Buffer | undefined> {
    const cached = this.cache.fileOf(sha);
    const data = cached ? await readFile(cached).catch(() => undefined) : undefined;
    return data ?? this.local.read(sha);
  }

  /** Logs a refused entry once (listings see it again and again). */
  private untrusted(err: UntrustedManifestError): UntrustedManifestError {
    if (!this.reported.has(err.message)) {
      this.reported.add(err.message);
      this.onUntrusted(err);
    }
    return err;
  }

  // ------------------------------------------------------------------ commit

  async commit(id: string, srcDir: string, meta: object): Promise<{ manifest: Manifest; stats: CommitStats }> {
    assertId(id);
    const t0 = Date.now();
    try {
      return await this.commitInner(id, srcDir, meta, t0);
    } catch (err) {
      if (err instanceof CommitError) throw err;
      throw new CommitError(id, (err as Error).message, { cause: err });
    }
  }

  private async commitInner(id: string, srcDir: string, meta: object, t0: number) {
    const stats: CommitStats = { bytes: 0, chunks: 0, reused: 0, uploadedChunks: 0, uploadedBytes: 0, durationMs: 0 };
    // Pass 1: hash every chunk (and warm the local cache) without touching the backend.
    const warm = this.cacheOnCommit ? (sha: string, data: Buffer) => this.cache.insert(sha, data) : undefined;
    const { files, where, ...sizes } = await chunkDir(id, srcDir, warm);
    stats.bytes = sizes.bytes;
    stats.chunks = sizes.chunks;

    const digests = [...where.keys()];
    const lease = await Lease.write(this.backend, id, digests);
    try {
      await this.hooks.afterLease?.(id);
      await this.waitForGc(id);
      // Only now may "exists" be trusted: no GC that missed our lease is still deleting.
      const missing: string[] = [];
      await forEachLimit(digests, this.concurrency, async (d) => {
        if (!(await this.backend.head(chunkKey(d)))) missing.push(d);
      });
      await this.hooks.afterExistenceCheck?.(id, missing);

      // Pass 2: read back, compress (a batch per zstd process) and upload the missing chunks.
      const readPiece = async (d: string): Promise<Buffer> => {
        const piece = where.get(d) as LocalPiece;
        const data = Buffer.allocUnsafe(piece.size);
        const fh = await open(piece.file, "r");
        try {
          const n = await readFully(fh, data, piece.size, piece.offset);
          if (n !== piece.size || (await sha256Fair(data)) !== d) {
            throw new CommitError(id, `${piece.file} changed while it was being committed`);
          }
        } finally {
          await fh.close();
        }
        return data;
      };
      await forEachLimit(inBatches(missing), 2, async (digests) => {
        const datas = await Promise.all(digests.map(readPiece));
        const zs = await compressMany(datas, this.level);
        await forEachLimit(
          digests.map((d, i) => [d, zs[i] as Buffer] as const),
          this.concurrency,
          async ([d, z]) => {
            await this.backend.put(chunkKey(d), z);
            stats.uploadedChunks++;
            stats.uploadedBytes += z.length;
            countRepositoryUpload(z.length);
            await lease.refreshIfOlder(this.leaseTtlMs);
          },
        );
      });
      stats.reused = stats.chunks - stats.uploadedChunks;

      const manifest = manifestOf(id, files, meta);
      // The manifest is what makes the snapshot exist; it goes last.
      const key = manifestKey(id);
      await this.backend.put(key, this.key.seal("manifest", key, manifest));
      if (this.peers) {
        this.local.add(id, where);
        this.peers.holding(id);
      }
      stats.durationMs = Date.now() - t0;
      return { manifest, stats };
    } finally {
      await lease.release();
    }
  }

  /**
   * What a commit of `srcDir` as `id` would store, built here without the backend and sealed
   * as the repository's manifests are: a peer resumes from it before the commit ends, its
   * chunks served from `srcDir` (a copy nothing else changes) under `localId` until
   * forgetOffer. The peer opens it with openOffered and checks every chunk's digest.
   */
  async offer(id: string, srcDir: string, meta: object, localId: string): Promise<Buffer> {
    const { files, where } = await chunkDir(id, srcDir);
    const manifest = manifestOf(id, files, meta);
    this.local.add(localId, where);
    return this.key.seal("manifest", manifestKey(id), manifest);
  }

  forgetOffer(localId: string): void {
    this.local.forget(localId);
  }

  /** A manifest a peer sent (offer): refused, as one read from the backend, unless sealed with this cluster's key for `id`. */
  openOffered(id: string, raw: Buffer): Manifest {
    const key = manifestKey(id);
    return checkManifest(id, this.key.open("manifest", key, raw));
  }

  /** Waits while a GC that may have missed our lease is running (see docs/storage.md). */
  private async waitForGc(id: string): Promise<void> {
    const deadline = Date.now() + this.gcLockTtlMs;
    while ((await activeGcLocks(this.backend, this.gcLockTtlMs)).length > 0) {
      if (Date.now() > deadline) throw new CommitError(id, "a garbage collection did not finish in time");
      await this.hooks.waitingForGc?.(id);
      await sleep(this.gcPollMs);
    }
  }

  // ------------------------------------------------------------------ read side

  async get(id: string): Promise<Manifest | undefined> {
    let key: string;
    try {
      key = manifestKey(id);
    } catch {
      return undefined;
    }
    const raw = await this.backend.get(key);
    if (!raw) return undefined;
    try {
      // Unsigned or signed with another key: treated like garbage, never as a snapshot.
      return checkManifest(id, this.key.open("manifest", key, raw));
    } catch (err) {
      throw err instanceof UntrustedManifestError ? this.untrusted(err) : err;
    }
  }

  announce(id: string, names: string[]): Promise<void> {
    return announce(this.backend, this.key, id, names);
  }

  claim(name: string, holder: string): Promise<boolean> {
    return claim(this.backend, this.key, name, holder);
  }

  async claimHolder(name: string): Promise<string | undefined> {
    return (await claimOf(this.backend, this.key, name))?.holder;
  }

  withdraw(id: string): Promise<void> {
    return withdraw(this.backend, id);
  }

  announced(maxAgeMs?: number): Promise<Announcement[]> {
    return announced(this.backend, this.key, maxAgeMs, (e) => this.untrusted(e));
  }

  waitFor(id: string, timeoutMs: number): Promise<Manifest | undefined> {
    return waitFor((x) => this.get(x), id, timeoutMs);
  }

  /** Every manifest, oldest first; unreadable ones are skipped (get(id) says why). */
  async list(): Promise<Manifest[]> {
    const ids: string[] = [];
    for await (const o of this.backend.list(MANIFESTS)) {
      const id = idOfManifestKey(o.key);
      if (id) ids.push(id);
    }
    const out: Manifest[] = [];
    await forEachLimit(ids, this.concurrency, async (id) => {
      const m = await this.get(id).catch(() => undefined);
      if (m) out.push(m);
    });
    return out.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
  }

  async materialize(id: string, destDir: string): Promise<void> {
    const m = await this.get(id);
    if (!m) throw new SnapshotNotFoundError(id);
    return this.materializeFrom(m, destDir);
  }

  /**
   * As materialize, from a manifest given (one a peer sent, checked by openOffered); with
   * `holders`, those nodes are asked for its chunks before the backend. Every chunk is
   * verified by its digest whoever sends it.
   */
  async materializeFrom(m: Manifest, destDir: string, holders?: ChunkHolder[]): Promise<void> {
    const id = m.id;
    // Build beside destDir and rename at the end: a failure never leaves destDir looking complete.
    const staging = join(dirname(destDir), `.${basename(destDir)}.partial-${randomBytes(4).toString("hex")}`);
    await mkdir(staging, { recursive: true });
    const handles: FileHandle[] = [];
    try {
      const jobs: { fh: FileHandle; offset: number; ref: ChunkRef }[] = [];
      for (const f of m.files) {
        const fh = await open(join(staging, f.name), "w", 0o644);
        handles.push(fh);
        let offset = 0;
        for (const ref of f.chunks) {
          jobs.push({ fh, offset, ref });
          offset += ref.size;
        }
      }
      await forEachLimit(inBatches(jobs), 2, async (batch) => {
        const datas = await this.fetcher.loadBatch(
          id,
          batch.map((j) => j.ref),
          holders,
        );
        await forEachLimit(
          batch.map((j, i) => [j, datas[i] as Buffer] as const),
          this.concurrency,
          async ([j, data]) => {
            let done = 0;
            while (done < data.length) {
              const { bytesWritten } = await j.fh.write(data, done, data.length - done, j.offset + done);
              done += bytesWritten;
            }
          },
        );
      });
      for (const fh of handles) await fh.sync();
      for (const fh of handles.splice(0)) await fh.close();
      await fsyncDir(staging);
      await rmdir(destDir).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") throw new Error(`cannot materialize '${id}' into ${destDir}: ${err.message}`);
      });
      await rename(staging, destDir);
      await fsyncDir(dirname(destDir));
      if (this.peers) {
        this.local.addManifest(m, destDir);
        this.peers.holding(id);
      }
    } catch (err) {
      for (const fh of handles) await fh.close().catch(() => {});
      await rm(staging, { recursive: true, force: true });
      throw err;
    }
  }

  /** Loads every chunk of a snapshot into the cache without writing files (e.g. before a resume). */
  async prefetch(id: string): Promise<void> {
    const m = await this.get(id);
    if (!m) throw new SnapshotNotFoundError(id);
    const refs = [...new Map(m.files.flatMap((f) => f.chunks.map((c) => [c.sha256, c] as const))).values()];
    await forEachLimit(inBatches(refs), 2, async (batch) => {
      await this.fetcher.loadBatch(id, batch);
    });
    if (this.cache.maxBytes > 0) this.peers?.holding(id);
  }

  // ------------------------------------------------------------------ cache pins

  /** Keeps a manifest's chunks in the cache (never evicted) until unpin(id). False when unknown. */
  async pin(id: string): Promise<boolean> {
    const m = await this.get(id);
    if (!m) return false;
    this.pinManifest(m);
    return true;
  }

  pinManifest(m: Manifest): void {
    this.cache.pin(
      m.id,
      m.files.flatMap((f) => f.chunks.map((c) => c.sha256)),
    );
  }

  unpin(id: string): void {
    this.cache.unpin(id);
  }

  /** Cache counters plus occupancy, for benchmarks and /metrics. */
  metrics(): CacheCounters & { cacheUsedBytes: number; cacheMaxBytes: number; cacheChunks: number; pins: number } {
    return {
      ...this.cache.counters,
      cacheUsedBytes: this.cache.usedBytes,
      cacheMaxBytes: this.cache.maxBytes,
      cacheChunks: this.cache.chunkCount,
      pins: this.cache.pinnedOwners().length,
    };
  }

  // ------------------------------------------------------------------ delete, gc

  async delete(id: string): Promise<void> {
    const m = await this.get(id).catch(() => undefined);
    await this.backend.delete(manifestKey(id));
    this.local.forget(id);
    this.peers?.forget(id);
    if (m && this.gcOnDelete) {
      // Best effort: what this misses, the periodic gc() collects.
      await this.freed.free(m.files.flatMap((f) => f.chunks.map((c) => c.sha256)));
    }
  }

  /** Deletes chunks no manifest (and no commit in flight) references; see gc.ts. */
  gc(opts: GcOptions = {}): Promise<GcResult> {
    return collectGarbage(
      this.backend,
      { leaseTtlMs: this.leaseTtlMs, gcLockTtlMs: this.gcLockTtlMs },
      { graceMs: this.gcGraceMs, ...opts },
      this.hooks,
    );
  }
}

/** What `aenv-server gc` and the periodic timer call. */
export function runGc(repo: ChunkRepository, opts?: GcOptions): Promise<GcResult> {
  return repo.gc(opts);
}
