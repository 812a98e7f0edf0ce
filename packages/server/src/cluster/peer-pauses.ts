import { keys } from "@aenv/edge/cluster-keys";
import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { z } from "zod";
import type { PausePeers, PeerPause } from "../orchestrator/pause-offers.js";
import { readAll } from "../util/read-all.js";
import { chunkHolderAt } from "./peer-chunks.js";
import { HOLDER_TTL_S, PeerLink } from "./peer-link.js";

/** Where a node serves a paused sandbox's manifest to its peers (the node API, behind the API key). */
export const peerPausePath = (sandboxId: string) => `/cluster/pauses/${encodeURIComponent(sandboxId)}`;

/** A pause manifest is a few hundred KB for a GB image; anything far larger is not one. */
const MAX_MANIFEST_BYTES = 32 * 2 ** 20;
/** The holder builds the manifest when first asked (it hashes the image): minutes for a large one. */
const BUILD_WAIT_MS = 5 * 60_000;

const Offer = z.object({
  node: z.string().min(1).max(256),
  url: z
    .string()
    .max(2048)
    .refine((u) => /^https?:\/\/[^/]+$/.test(u), "not a node's base URL"),
  tag: z.string().min(1).max(64),
});

/** Removes the offer only while it still names this pause (a newer pause replaces it). */
const WITHDRAW = `local v = redis.call('get', KEYS[1])
if not v then return 0 end
local ok, o = pcall(cjson.decode, v)
if ok and type(o) == 'table' and o.tag == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0`;

/**
 * Paused sandboxes whose commit has not finished, between the cluster's nodes (cluster.p2p):
 * Redis names the node holding each (`aenv:pause:{id}`: node, its URL, the pause's tag), and
 * that node sends its manifest over its API. The URL is kept in the offer, not read from the
 * node's heartbeat: a node the cluster counts dead may still be up to send it. What arrives is
 * the caller's to verify (pause-from-peer.ts).
 */
export class RedisPausePeers implements PausePeers {
  private readonly link: PeerLink;

  constructor(private readonly d: { redis: Redis; nodeId: string; url: string; apiKey: string; log: Logger }) {
    this.link = new PeerLink(d);
  }

  offer(sandboxId: string, tag: string): void {
    const value = JSON.stringify({ node: this.d.nodeId, url: this.d.url, tag });
    this.d.redis
      .set(keys.pause(sandboxId), value, "EX", HOLDER_TTL_S)
      .catch((err: Error) => this.d.log.warn({ err: err.message, sandboxID: sandboxId }, "pause offer not published"));
  }

  withdraw(sandboxId: string, tag: string): void {
    this.d.redis
      .eval(WITHDRAW, 1, keys.pause(sandboxId), tag)
      .catch((err: Error) => this.d.log.warn({ err: err.message, sandboxID: sandboxId }, "pause offer not withdrawn"));
  }

  async fetch(sandboxId: string): Promise<PeerPause | undefined> {
    const raw = await this.d.redis.get(keys.pause(sandboxId));
    if (!raw) return undefined;
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      parsed = undefined;
    }
    const offer = Offer.safeParse(parsed);
    if (!offer.success) throw new Error("the pause offer in Redis is malformed");
    const { node, url, tag } = offer.data;
    if (node === this.d.nodeId) return undefined;
    const sealed = await readAll(
      await this.link.open(url, peerPausePath(sandboxId), BUILD_WAIT_MS),
      MAX_MANIFEST_BYTES,
    );
    return { node, tag, sealed, holder: chunkHolderAt(this.link, node, url) };
  }
}
