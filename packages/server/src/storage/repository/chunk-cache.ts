import { randomBytes } from "node:crypto";
import type { Dirent } from "node:fs";
import { mkdir, readdir, readFile, rename, stat, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sha256Fair } from "./hash.js";
import { isDigest } from "./layout.js";

export interface CacheCounters {
  /** Chunk reads answered from the cache (after verification). */
  hits: number;
  /** Chunk reads that had to go to the backend. */
  misses: number;
  /** Reads that joined a fetch of the same chunk already in flight (no extra backend get). */
  coalesced: number;
  /** Backend gets issued for chunks, and the (compressed) bytes they returned. */
  backendGets: number;
  bytesFetched: number;
  /** Uncompressed bytes served from the cache. */
  bytesFromCache: number;
  /** Chunks dropped to make room (least recently used, never pinned ones). */
  evictions: number;
  /** Chunks served without being cached because everything left in the cache is pinned. */
  bypassed: number;
  /** Cache files whose content no longer matched their digest (deleted and fetched again). */
  corrupt: number;
  /** Chunks another node of the cluster sent (cluster.p2p), and their uncompressed bytes. */
  peerChunks: number;
  peerBytes: number;
  /** Chunks a peer sent wrong (size or digest), each then asked elsewhere. */
  peerRefused: number;
}

export interface ChunkCacheOptions {
  /** Folder of <aa>/<sha256> files holding uncompressed chunks; unused when maxBytes is 0. */
  dir: string;
  /** Upper bound on the bytes of chunks kept; 0 disables caching (every read fetches). */
  maxBytes: number;
}

/**
 * Node-local cache of verified, uncompressed chunks, bounded in bytes, LRU among unpinned
 * chunks. Pins are per owner (a manifest id the orchestrator keeps on this node) and in
 * memory: after a restart the orchestrator pins again what its sandboxes need.
 *
 * When a chunk does not fit even after evicting every unpinned chunk (the cache is full of
 * pinned chunks, or the chunk is larger than the cache), it is served straight through
 * without being cached (`bypassed` counts it); reads never fail because the cache is full.
 */
export class ChunkCache {
  readonly counters: CacheCounters = {
    hits: 0,
    misses: 0,
    coalesced: 0,
    backendGets: 0,
    bytesFetched: 0,
    bytesFromCache: 0,
    evictions: 0,
    bypassed: 0,
    corrupt: 0,
    peerChunks: 0,
    peerBytes: 0,
    peerRefused: 0,
  };
  /** digest → size, in least-recently-used-first order (Map keeps insertion order). */
  private readonly lru = new Map<string, number>();
  private readonly pins = new Map<string, Set<string>>();
  private readonly pinCount = new Map<string, number>();
  private readonly inflight = new Map<string, Promise<Buffer>>();
  /** Bytes of cached chunks plus writes in progress. */
  private used = 0;
  private ready: Promise<void> | undefined;

  constructor(readonly opts: ChunkCacheOptions) {}

  get usedBytes(): number {
    return this.used;
  }

  get maxBytes(): number {
    return this.opts.maxBytes;
  }

  get chunkCount(): number {
    return this.lru.size;
  }

  private path(sha: string): string {
    return join(this.opts.dir, sha.slice(0, 2), sha);
  }

  /** Indexes what a previous run left (oldest access first) and trims it to maxBytes. */
  init(): Promise<void> {
    this.ready ??= this.scan();
    return this.ready;
  }

  private async scan(): Promise<void> {
    if (this.opts.maxBytes <= 0) return;
    await mkdir(this.opts.dir, { recursive: true });
    const found: { sha: string; size: number; at: number }[] = [];
    for (const sub of await readdir(this.opts.dir, { withFileTypes: true })) {
      if (!sub.isDirectory()) continue;
      let files: Dirent[];
      try {
        files = await readdir(join(this.opts.dir, sub.name), { withFileTypes: true });
      } catch {
        continue;
      }
      for (const f of files) {
        const p = join(this.opts.dir, sub.name, f.name);
        if (!isDigest(f.name)) {
          await unlink(p).catch(() => {}); // temp files of a write cut short
          continue;
        }
        const st = await stat(p).catch(() => undefined);
        if (st) found.push({ sha: f.name, size: st.size, at: Math.max(st.atimeMs, st.mtimeMs) });
      }
    }
    found.sort((a, b) => a.at - b.at);
    for (const f of found) {
      this.lru.set(f.sha, f.size);
      this.used += f.size;
    }
    this.makeRoom(0);
  }

  has(sha: string): boolean {
    return this.lru.has(sha);
  }

  /**
   * The file a cached chunk is in, for serving it to a peer (which verifies what it gets, so
   * a file spoiled since it was cached costs that peer one refused chunk, not a wrong restore).
   */
  fileOf(sha: string): string | undefined {
    return this.lru.has(sha) ? this.path(sha) : undefined;
  }

  /** Whether a getOrLoad of this chunk is fetching it right now. */
  isLoading(sha: string): boolean {
    return this.inflight.has(sha);
  }

  isPinned(sha: string): boolean {
    return (this.pinCount.get(sha) ?? 0) > 0;
  }

  /** Marks digests as needed by owner: they are never evicted until unpin(owner). Idempotent. */
  pin(owner: string, digests: Iterable<string>): void {
    this.unpin(owner);
    const set = new Set(digests);
    this.pins.set(owner, set);
    for (const d of set) this.pinCount.set(d, (this.pinCount.get(d) ?? 0) + 1);
  }

  unpin(owner: string): void {
    const set = this.pins.get(owner);
    if (!set) return;
    this.pins.delete(owner);
    for (const d of set) {
      const n = (this.pinCount.get(d) ?? 1) - 1;
      if (n > 0) this.pinCount.set(d, n);
      else this.pinCount.delete(d);
    }
  }

  pinnedOwners(): string[] {
    return [...this.pins.keys()];
  }

  /**
   * The verified bytes of a chunk: from the cache, else from load() (which must fetch, verify
   * and return the uncompressed bytes plus the bytes it transferred). Concurrent calls for
   * the same digest share one load().
   */
  async getOrLoad(
    sha: string,
    load: () => Promise<{ data: Buffer; fetchedBytes: number; coalesced?: boolean; fromPeer?: boolean }>,
  ): Promise<Buffer> {
    await this.init();
    const pending = this.inflight.get(sha);
    if (pending) {
      this.counters.coalesced++;
      return pending;
    }
    const p = (async () => {
      const cached = await this.read(sha);
      if (cached) return cached;
      const { data, fetchedBytes, coalesced, fromPeer } = await load();
      if (coalesced) {
        // Another restore's batch fetched it.
        this.counters.coalesced++;
      } else if (fromPeer) {
        this.counters.peerChunks++;
        this.counters.peerBytes += data.length;
      } else {
        this.counters.misses++;
        this.counters.backendGets++;
        this.counters.bytesFetched += fetchedBytes;
      }
      await this.insert(sha, data);
      return data;
    })();
    this.inflight.set(sha, p);
    try {
      return await p;
    } finally {
      this.inflight.delete(sha);
    }
  }

  /** A cached chunk, verified against its digest; a bad or vanished file counts as a miss. */
  private async read(sha: string): Promise<Buffer | undefined> {
    const size = this.lru.get(sha);
    if (size === undefined) return undefined;
    let data: Buffer;
    try {
      data = await readFile(this.path(sha));
    } catch {
      this.forget(sha);
      return undefined;
    }
    if (data.length !== size || (await sha256Fair(data)) !== sha) {
      this.counters.corrupt++;
      this.forget(sha);
      await unlink(this.path(sha)).catch(() => {});
      return undefined;
    }
    // Most recently used goes to the end.
    this.lru.delete(sha);
    this.lru.set(sha, size);
    this.counters.hits++;
    this.counters.bytesFromCache += data.length;
    return data;
  }

  /** Adds verified bytes; returns false (and caches nothing) when they cannot fit. */
  async insert(sha: string, data: Buffer): Promise<boolean> {
    await this.init();
    if (this.opts.maxBytes <= 0) return false;
    if (this.lru.has(sha)) return true;
    if (!this.makeRoom(data.length)) {
      this.counters.bypassed++;
      return false;
    }
    this.used += data.length; // reserved before the write so concurrent inserts respect the bound
    const dir = join(this.opts.dir, sha.slice(0, 2));
    const tmp = join(dir, `.tmp-${randomBytes(6).toString("hex")}`);
    try {
      await mkdir(dir, { recursive: true });
      await writeFile(tmp, data);
      await rename(tmp, this.path(sha));
    } catch {
      this.used -= data.length;
      await unlink(tmp).catch(() => {});
      return false; // a cache that cannot write still serves the read
    }
    if (this.lru.has(sha))
      this.used -= data.length; // a concurrent insert of the same chunk won
    else this.lru.set(sha, data.length);
    return true;
  }

  private forget(sha: string): void {
    const size = this.lru.get(sha);
    if (size === undefined) return;
    this.lru.delete(sha);
    this.used -= size;
  }

  /** Evicts unpinned chunks, least recently used first, until `need` more bytes fit. */
  private makeRoom(need: number): boolean {
    const max = this.opts.maxBytes;
    if (need > max) return false;
    if (this.used + need <= max) return true;
    let evictable = 0;
    for (const [sha, size] of this.lru) if (!this.isPinned(sha)) evictable += size;
    if (this.used - evictable + need > max) return false;
    for (const [sha, size] of this.lru) {
      if (this.used + need <= max) break;
      if (this.isPinned(sha)) continue;
      this.lru.delete(sha);
      this.used -= size;
      this.counters.evictions++;
      unlink(this.path(sha)).catch(() => {});
    }
    return true;
  }

  /** Drops a chunk from the cache (e.g. after the repository found it bad). */
  async evict(sha: string): Promise<void> {
    this.forget(sha);
    await unlink(this.path(sha)).catch(() => {});
  }
}
