import { Readable, Transform } from "node:stream";
import { keys, type NodeInfo } from "@aenv/edge/cluster-keys";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import type { PeerBlobs } from "../storage/images/index.js";
import type { TreeHolder, TreePeers } from "../templates/lazy-trees.js";

/** A holder's entry outlives a lost forget (a node that died): a stale one costs one refused request. */
const HOLDER_TTL_S = 7 * 24 * 3600;
/** A peer that has not answered (headers) by then, or sends nothing for this long, is given up on. */
const PEER_TIMEOUT_MS = 10_000;

/** Where a node serves the blobs it holds to its peers (the node API, behind the API key). */
export const peerBlobPath = (digest: string) => `/cluster/blobs/${digest.replace(":", "/")}`;

/**
 * Layer blobs from the cluster's other nodes before the registry: Redis keeps, per blob, the
 * nodes that hold it (`aenv:blob:{digest}`); a node asks them in random order over their API
 * and verifies what arrives (see ImageStore). A popular image is then pulled from its registry
 * about once per cluster, and later nodes copy it over the cluster's own network.
 */
export class RedisPeerBlobs implements PeerBlobs, TreePeers {
  constructor(private readonly d: { redis: Redis; nodeId: string; apiKey: string; log: Logger }) {}

  async holders(digest: string) {
    const live = await this.liveOthers(await this.d.redis.smembers(keys.blob(digest)));
    return live.map(({ id, url }) => ({ name: id, open: () => this.open(url, peerBlobPath(digest)) }));
  }

  /** The other nodes among `ids` that are alive (a dead one's disk is not reachable), in random order. */
  private async liveOthers(ids: string[]): Promise<Array<{ id: string; url: string }>> {
    const others = ids.filter((id) => id !== this.d.nodeId).sort(() => Math.random() - 0.5);
    const out: Array<{ id: string; url: string }> = [];
    for (const id of others) {
      const raw = await this.d.redis.get(keys.node(id));
      if (raw) out.push({ id, url: (JSON.parse(raw) as NodeInfo).url });
    }
    return out;
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
    const live = await this.liveOthers(Object.keys(all));
    return live.map(({ id, url }) => ({
      name: id,
      indexSha256: all[id] as string,
      get: (path) => this.open(url, path),
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

  private async open(url: string, path: string): Promise<Readable> {
    const ac = new AbortController();
    let timer = setTimeout(() => ac.abort(new Error("peer did not answer")), PEER_TIMEOUT_MS);
    const res = await fetch(`${url}${path}`, {
      headers: { "x-api-key": this.d.apiKey },
      signal: ac.signal,
    });
    if (res.status !== 200 || !res.body) {
      clearTimeout(timer);
      ac.abort();
      throw new Error(`peer answered ${res.status}`);
    }
    const body = Readable.fromWeb(res.body as Parameters<typeof Readable.fromWeb>[0]);
    const idle = () => {
      clearTimeout(timer);
      timer = setTimeout(() => ac.abort(new Error("peer stopped sending")), PEER_TIMEOUT_MS);
    };
    idle();
    // A pass-through that sees each chunk (a 'data' listener would take them from the reader).
    const watched = new Transform({
      transform(chunk: Buffer, _enc, done) {
        idle();
        done(null, chunk);
      },
    });
    body.on("error", (err) => watched.destroy(err));
    watched.on("close", () => clearTimeout(timer));
    return body.pipe(watched);
  }
}
