import { keys } from "@aenv/edge/cluster-keys";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import type { PeerBlobs } from "../storage/images/index.js";
import type { TreeHolder, TreePeers } from "../templates/lazy-trees.js";
import { HOLDER_TTL_S, PeerLink } from "./peer-link.js";

/** Where a node serves the blobs it holds to its peers (the node API, behind the API key). */
export const peerBlobPath = (digest: string) => `/cluster/blobs/${digest.replace(":", "/")}`;

/**
 * Layer blobs from the cluster's other nodes before the registry: Redis keeps, per blob, the
 * nodes that hold it (`aenv:blob:{digest}`); a node asks them in random order over their API
 * and verifies what arrives (see ImageStore). A popular image is then pulled from its registry
 * about once per cluster, and later nodes copy it over the cluster's own network.
 */
export class RedisPeerBlobs implements PeerBlobs, TreePeers {
  private readonly link: PeerLink;

  constructor(private readonly d: { redis: Redis; nodeId: string; apiKey: string; log: Logger }) {
    this.link = new PeerLink(d);
  }

  async holders(digest: string) {
    const live = await this.link.liveOthers(await this.d.redis.smembers(keys.blob(digest)));
    return live.map(({ id, url }) => ({ name: id, open: () => this.link.open(url, peerBlobPath(digest)) }));
  }

  holding(digests: string[]): void {
    if (digests.length === 0) return;
    const m = this.d.redis.multi();
    for (const d of digests) m.sadd(keys.blob(d), this.d.nodeId).expire(keys.blob(d), HOLDER_TTL_S);
    m.exec().catch((err: Error) => this.d.log.warn({ err: err.message }, "blob holders not published"));
  }

  forget(digest: string): void {
    this.d.redis
      .srem(keys.blob(digest), this.d.nodeId)
      .catch((err: Error) => this.d.log.warn({ err: err.message }, "blob holder not removed"));
  }

  /** Live nodes that hold an image's whole tree (index and content), in random order. */
  async treeHolders(imageDigest: string): Promise<TreeHolder[]> {
    const all = await this.d.redis.hgetall(keys.tree(imageDigest));
    const live = await this.link.liveOthers(Object.keys(all));
    return live.map(({ id, url }) => ({
      name: id,
      indexSha256: all[id] as string,
      get: (path) => this.link.open(url, path),
    }));
  }

  publishTree(imageDigest: string, indexSha256: string): void {
    this.d.redis
      .multi()
      .hset(keys.tree(imageDigest), this.d.nodeId, indexSha256)
      .expire(keys.tree(imageDigest), HOLDER_TTL_S)
      .exec()
      .catch((err: Error) => this.d.log.warn({ err: err.message }, "image tree not published"));
  }

  forgetTree(imageDigest: string): void {
    this.d.redis
      .hdel(keys.tree(imageDigest), this.d.nodeId)
      .catch((err: Error) => this.d.log.warn({ err: err.message }, "image tree not unpublished"));
  }
}
