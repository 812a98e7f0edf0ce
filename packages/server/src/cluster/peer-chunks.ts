import { keys } from "@aenv/edge/cluster-keys";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import type { ChunkPeers } from "../storage/repository/chunk-peers.js";
import type { ChunkHolder } from "../storage/repository/repository.js";
import { readAll } from "../util/read-all.js";
import { HOLDER_TTL_S, PeerLink } from "./peer-link.js";

/** Where a node serves a chunk of its cache to its peers (the node API, behind the API key). */
export const peerChunkPath = (sha256: string) => `/cluster/chunks/${sha256}`;

/**
 * Snapshot chunks from the cluster's other nodes before the repository: Redis keeps, per
 * manifest, the nodes whose chunk cache holds it (`aenv:chunks:{id}`), set when a node commits
 * or restores it. A snapshot started on many nodes (a fork's rollouts across a cluster) is
 * then read from the repository about once, the rest over the cluster's own network.
 */
export class RedisPeerChunks implements ChunkPeers {
  private readonly link: PeerLink;

  constructor(private readonly d: { redis: Redis; nodeId: string; apiKey: string; log: Logger }) {
    this.link = new PeerLink(d);
  }

  async holders(manifestId: string): Promise<ChunkHolder[]> {
    const live = await this.link.liveOthers(await this.d.redis.smembers(keys.chunks(manifestId)));
    return live.map(({ id, url }) => chunkHolderAt(this.link, id, url));
  }

  holding(manifestId: string): void {
    this.d.redis
      .multi()
      .sadd(keys.chunks(manifestId), this.d.nodeId)
      .expire(keys.chunks(manifestId), HOLDER_TTL_S)
      .exec()
      .catch((err: Error) => this.d.log.warn({ err: err.message }, "chunk holder not published"));
  }

  forget(manifestId: string): void {
    this.d.redis
      .del(keys.chunks(manifestId))
      .catch((err: Error) => this.d.log.warn({ err: err.message }, "chunk holders not removed"));
  }
}

/** A node at `url` as a chunk holder: a chunk's bytes, never more than its size (the caller checks the digest). */
export function chunkHolderAt(link: PeerLink, name: string, url: string): ChunkHolder {
  return {
    name,
    get: async (sha256: string, size: number) => readAll(await link.open(url, peerChunkPath(sha256)), size),
  };
}
