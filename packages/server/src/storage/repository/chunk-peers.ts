import { forEachLimit } from "../../util/concurrency.js";
import { rendezvous } from "../../util/rendezvous.js";
import { sha256Fair } from "./hash.js";
import type { ChunkHolder, ChunkRef } from "./repository.js";

/**
 * Where a node learns which other nodes hold a manifest's chunks (cluster.p2p: Redis), and
 * tells them it does. Holding is per manifest, not per chunk: a node that committed or
 * restored a manifest has its chunks in its cache until they are evicted, and a holder that
 * lost one answers "not held" and costs one request.
 */
export interface ChunkPeers {
  holders(manifestId: string): Promise<ChunkHolder[]>;
  holding(manifestId: string): void;
  forget(manifestId: string): void;
}

export interface PeerFetchResult {
  /** Verified bytes by digest: what the peers sent right. */
  got: Map<string, Buffer>;
  /** Chunks a peer sent whose size or digest was wrong (each was asked of the next holder). */
  refused: number;
}

/**
 * Asks the holders for each chunk, the next holder after one that does not have it or sends
 * it wrong. Nothing a peer sends is trusted: a chunk counts only when its size and sha256
 * are the manifest's. What no holder sent right is left for the repository.
 */
export async function fetchFromPeers(
  holders: ChunkHolder[],
  refs: ChunkRef[],
  concurrency: number,
): Promise<PeerFetchResult> {
  const got = new Map<string, Buffer>();
  let refused = 0;
  if (holders.length === 0) return { got, refused };
  await forEachLimit(refs, concurrency, async (r) => {
    for (const h of rendezvous(holders, r.sha256)) {
      const data = await h.get(r.sha256, r.size).catch(() => undefined);
      if (!data) continue;
      if (data.length === r.size && (await sha256Fair(data)) === r.sha256) {
        got.set(r.sha256, data);
        return;
      }
      refused++;
    }
  });
  return { got, refused };
}
