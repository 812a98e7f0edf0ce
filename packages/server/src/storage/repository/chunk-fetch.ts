import { forEachLimit } from "../../util/concurrency.js";
import type { RepositoryBackend } from "./backend.js";
import type { ChunkCache } from "./chunk-cache.js";
import { type ChunkPeers, fetchFromPeers } from "./chunk-peers.js";
import { sha256Fair } from "./hash.js";
import { chunkKey } from "./layout.js";
import { type ChunkHolder, type ChunkRef, CorruptChunkError, MissingChunkError } from "./repository.js";
import { decompressMany, MAX_BATCH } from "./zstd.js";

type Loaded = { data: Buffer; fetchedBytes: number; fromPeer?: boolean } | Error;

/** Up to MAX_BATCH items per batch: one zstd run each. */
export function inBatches<T>(items: T[]): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += MAX_BATCH) out.push(items.slice(i, i + MAX_BATCH));
  return out;
}

/**
 * The read side of the chunk repository: chunks fetched from the backend, decompressed a
 * batch per zstd process and verified against their digest, through the node-local cache;
 * a chunk that one restore is fetching is awaited by the others, not fetched again. With
 * peers (cluster.p2p), the other nodes that hold a manifest are asked first, and only what
 * none of them sends right goes to the backend.
 */
export class ChunkFetcher {
  /** Chunks batches are fetching right now, so concurrent restores share the fetch. */
  private readonly fetching = new Map<string, Promise<Loaded>>();

  private peers: ChunkPeers | undefined;

  constructor(
    private readonly backend: RepositoryBackend,
    private readonly cache: ChunkCache,
    private readonly concurrency: number,
  ) {}

  usePeers(peers: ChunkPeers): void {
    this.peers = peers;
  }

  /** One chunk fetched, decompressed and verified (bytes for the cache, bytes transferred). */
  private async fetchOne(
    id: string,
    ref: ChunkRef,
  ): Promise<{ data: Buffer; fetchedBytes: number; fromPeer?: boolean }> {
    const got = (await this.fetchBatch(id, [ref])).get(ref.sha256) as Loaded;
    if (got instanceof Error) throw got;
    return got;
  }

  /**
   * The verified bytes of many chunks, in order. Cached chunks and chunks another restore is
   * already fetching come through the cache (hits, coalesced); the others are fetched here and
   * decompressed by one zstd process for the whole batch.
   */
  async loadBatch(id: string, refs: ChunkRef[], holders?: ChunkHolder[]): Promise<Buffer[]> {
    await this.cache.init();
    // Chunks some other restore's batch is fetching are awaited, not fetched again.
    const shared = new Map<string, Promise<Loaded>>();
    const mine = new Map<string, ChunkRef>();
    for (const r of refs) {
      const other = this.fetching.get(r.sha256);
      if (other) shared.set(r.sha256, other);
      else if (!this.cache.has(r.sha256) && !this.cache.isLoading(r.sha256)) mine.set(r.sha256, r);
    }
    const todo = [...mine.values()];
    const batch = this.fetchBatch(id, todo, holders);
    for (const r of todo) {
      const p = batch.then((m) => m.get(r.sha256) as Loaded);
      p.catch(() => {});
      this.fetching.set(r.sha256, p);
      void p
        .finally(() => {
          if (this.fetching.get(r.sha256) === p) this.fetching.delete(r.sha256);
        })
        .catch(() => {});
    }
    return Promise.all(
      refs.map((r) =>
        this.cache.getOrLoad(r.sha256, async () => {
          const own = mine.has(r.sha256) ? this.fetching.get(r.sha256) : undefined;
          const p = own ?? shared.get(r.sha256);
          if (!p) return this.fetchOne(id, r);
          const got = await p;
          if (got instanceof Error) throw got;
          return own ? got : { ...got, coalesced: true };
        }),
      ),
    );
  }

  /**
   * The peers' chunks first (`holders`, else those Redis names), then the backend's for the
   * rest; each result or its error.
   */
  private async fetchBatch(id: string, refs: ChunkRef[], holders?: ChunkHolder[]): Promise<Map<string, Loaded>> {
    const out = new Map<string, Loaded>();
    const peers = this.peers;
    if (!refs.length || (!peers && !holders)) return this.fetchFromBackend(id, refs, out);
    // A peer lookup that fails (Redis away) only means the repository serves it all.
    const asked = holders ?? (await peers?.holders(id).catch(() => [])) ?? [];
    const { got, refused } = await fetchFromPeers(asked, refs, this.concurrency);
    this.cache.counters.peerRefused += refused;
    for (const [sha, data] of got) out.set(sha, { data, fetchedBytes: 0, fromPeer: true });
    return this.fetchFromBackend(
      id,
      refs.filter((r) => !got.has(r.sha256)),
      out,
    );
  }

  /** Fetches chunks and decompresses them with one zstd process, into `out`. */
  private async fetchFromBackend(id: string, todo: ChunkRef[], out: Map<string, Loaded>): Promise<Map<string, Loaded>> {
    if (!todo.length) return out;
    const zs: Array<Buffer | undefined> = new Array(todo.length);
    await forEachLimit(
      todo.map((r, i) => [r, i] as const),
      this.concurrency,
      async ([r, i]) => {
        zs[i] = await this.backend.get(chunkKey(r.sha256));
      },
    );
    const idx = todo.map((_, i) => i).filter((i) => zs[i] !== undefined);
    const datas = await decompressMany(idx.map((i) => ({ frame: zs[i] as Buffer, size: (todo[i] as ChunkRef).size })));
    todo.forEach((r, i) => {
      if (zs[i] === undefined) out.set(r.sha256, new MissingChunkError(id, r.sha256, this.backend.description));
    });
    for (const [k, i] of idx.entries()) {
      const r = todo[i] as ChunkRef;
      const data = datas[k] as Buffer | Error;
      if (data instanceof Error) {
        out.set(r.sha256, new CorruptChunkError(id, r.sha256, `does not decompress: ${data.message}`));
      } else if (data.length !== r.size) {
        out.set(r.sha256, new CorruptChunkError(id, r.sha256, `${data.length} bytes instead of ${r.size}`));
      } else if ((await sha256Fair(data)) !== r.sha256) {
        out.set(r.sha256, new CorruptChunkError(id, r.sha256, "digest mismatch"));
      } else out.set(r.sha256, { data, fetchedBytes: (zs[i] as Buffer).length });
    }
    return out;
  }
}
