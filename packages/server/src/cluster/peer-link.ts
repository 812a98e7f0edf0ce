import { Readable, Transform } from "node:stream";
import { keys, type NodeInfo } from "@aenv/edge/cluster-keys";
import type { Redis } from "ioredis";

/** A holder's entry outlives a lost forget (a node that died): a stale one costs one refused request. */
export const HOLDER_TTL_S = 7 * 24 * 3600;
/** A peer that has not answered (headers) by then, or sends nothing for this long, is given up on. */
const PEER_TIMEOUT_MS = 10_000;

/**
 * How a node reaches the others for what they hold (cluster.p2p): which of them are alive,
 * and a body from one of them over its node API (behind the API key), given up on when the
 * peer stalls. What arrives is the caller's to verify.
 */
export class PeerLink {
  constructor(private readonly d: { redis: Redis; nodeId: string; apiKey: string }) {}

  /** The other nodes among `ids` that are alive (a dead one's disk is not reachable), in random order. */
  async liveOthers(ids: string[]): Promise<Array<{ id: string; url: string }>> {
    const others = ids.filter((id) => id !== this.d.nodeId).sort(() => Math.random() - 0.5);
    const out: Array<{ id: string; url: string }> = [];
    for (const id of others) {
      const raw = await this.d.redis.get(keys.node(id));
      if (raw) out.push({ id, url: (JSON.parse(raw) as NodeInfo).url });
    }
    return out;
  }

  /** `answerMs`: how long the peer may take to answer (it may build what it sends first). */
  async open(url: string, path: string, answerMs = PEER_TIMEOUT_MS): Promise<Readable> {
    const ac = new AbortController();
    let timer = setTimeout(() => ac.abort(new Error("peer did not answer")), answerMs);
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
