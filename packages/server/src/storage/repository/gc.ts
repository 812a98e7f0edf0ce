/**
 * Garbage collection of chunks no manifest references. The protocol that keeps it safe
 * against concurrent commits on any node is argued in docs/storage.md; in short:
 *   GC:     write gc-lock → read leases → read manifests → delete unreferenced chunks → drop lock
 *   commit: write lease → wait while a live gc-lock exists → check which chunks exist → upload
 *           the missing ones → write manifest → drop lease
 */

import { forEachLimit } from "../../util/concurrency.js";
import type { ObjectInfo, RepositoryBackend } from "./backend.js";
import { CHUNKS, chunkKey, digestOfChunkKey, idOfManifestKey, MANIFESTS } from "./layout.js";
import { expiredGcLocks, GcLock, readLeases } from "./leases.js";
import type { Manifest } from "./repository.js";
import { unverifiedBody } from "./signing.js";

export interface GcOptions {
  /** Chunks written less than this long ago are kept even when unreferenced (default 0). */
  graceMs?: number;
  /** Report what would be deleted without deleting (default false). */
  dryRun?: boolean;
  /** Consider only these digests (delete(id) passes its manifest's chunks); default: all. */
  only?: Iterable<string>;
  /** Parallel deletes (default 16). */
  concurrency?: number;
}

export interface GcTiming {
  leaseTtlMs: number;
  gcLockTtlMs: number;
}

export interface GcHooks {
  /** The lock is visible and the leases have been read; manifests come next. */
  gcAfterLeases?(): Promise<void> | void;
}

export interface GcResult {
  manifests: number;
  /** Chunks looked at, and how many of them were referenced by a manifest or a live lease. */
  chunksScanned: number;
  chunksLive: number;
  /** Unreferenced but younger than the grace period. */
  chunksTooNew: number;
  chunksDeleted: number;
  /** Compressed bytes freed. */
  bytesDeleted: number;
  leasesLive: number;
  expiredLeasesRemoved: number;
  dryRun: boolean;
  durationMs: number;
}

export class GcError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(`gc: ${message}`, options);
    this.name = "GcError";
  }
}

/** Leaves this much of the lock's TTL unused, for clock differences between nodes. */
const lockMargin = (ttlMs: number) => Math.min(60_000, ttlMs / 4);

export async function collectGarbage(
  backend: RepositoryBackend,
  timing: GcTiming,
  opts: GcOptions = {},
  hooks: GcHooks = {},
): Promise<GcResult> {
  const t0 = Date.now();
  const graceMs = opts.graceMs ?? 0;
  const dryRun = opts.dryRun ?? false;
  const res: GcResult = {
    manifests: 0,
    chunksScanned: 0,
    chunksLive: 0,
    chunksTooNew: 0,
    chunksDeleted: 0,
    bytesDeleted: 0,
    leasesLive: 0,
    expiredLeasesRemoved: 0,
    dryRun,
    durationMs: 0,
  };
  const lock = await GcLock.acquire(backend);
  try {
    // 1. The chunks to consider. Listing may run before the leases are read: a chunk
    //    uploaded after this listing is simply not a candidate this time.
    const candidates = new Map<string, ObjectInfo>();
    if (opts.only) {
      for (const d of new Set(opts.only)) {
        const info = await backend.head(chunkKey(d));
        if (info) candidates.set(d, info);
      }
    } else {
      for await (const o of backend.list(CHUNKS)) {
        const d = digestOfChunkKey(o.key);
        if (d) candidates.set(d, o);
      }
    }
    res.chunksScanned = candidates.size;

    // 2. Leases, read only after our lock is visible: a commit whose lease we miss here
    //    wrote it after our lock, so it sees the lock and waits for us before it decides
    //    which chunks exist.
    const live = new Set<string>();
    const leases = await readLeases(backend, timing.leaseTtlMs);
    for (const l of leases.live) for (const d of l.digests) live.add(d);
    res.leasesLive = leases.live.length;
    await hooks.gcAfterLeases?.();

    // 3. Manifests, after the leases: a commit that dropped its lease before step 2 wrote
    //    its manifest before that, so we see it here. Fail closed on an unreadable one.
    for await (const o of backend.list(MANIFESTS)) {
      if (!idOfManifestKey(o.key)) continue;
      const raw = await backend.get(o.key);
      if (!raw) continue; // deleted meanwhile
      let m: Manifest;
      try {
        // Signature not checked: an entry a node refuses still keeps its chunks (say, one
        // written before signing, until it is signed again).
        m = unverifiedBody(raw) as Manifest;
        for (const f of m.files) for (const c of f.chunks) live.add(c.sha256);
      } catch (err) {
        throw new GcError(`manifest ${o.key} is unreadable; nothing deleted`, { cause: err });
      }
      res.manifests++;
    }

    // 4. Delete what nothing references and is past the grace period.
    const doomed: [string, ObjectInfo][] = [];
    const now = Date.now();
    for (const [d, info] of candidates) {
      if (live.has(d)) res.chunksLive++;
      else if (now - info.modified.getTime() < graceMs) res.chunksTooNew++;
      else doomed.push([d, info]);
    }
    await forEachLimit(doomed, opts.concurrency ?? 16, async ([d, info]) => {
      // Commits stop honouring our lock after its TTL: never delete past it.
      if (Date.now() - lock.at > timing.gcLockTtlMs - lockMargin(timing.gcLockTtlMs)) {
        throw new GcError("ran past its lock's TTL; stopped deleting (run it again)");
      }
      if (!dryRun) await backend.delete(chunkKey(d));
      res.chunksDeleted++;
      res.bytesDeleted += info.size;
    });

    if (!dryRun) {
      for (const k of leases.expired) await backend.delete(k);
      res.expiredLeasesRemoved = leases.expired.length;
      for (const k of await expiredGcLocks(backend, timing.gcLockTtlMs * 2)) await backend.delete(k);
    }
  } finally {
    await lock.release();
  }
  res.durationMs = Date.now() - t0;
  return res;
}
