import type { NodeInfo } from "@aenv/edge/cluster-keys";
import type { Logger } from "pino";
import type { ClusterView } from "./cluster-view.js";
import { call } from "./forward.js";
import { parseJson } from "./http-util.js";

type Layers = Array<{ digest: string; size: number }>;

/** An image's layers are asked of a node at most this often (a tag moves rarely; a wrong guess only costs a pull). */
const LAYERS_TTL_MS = 60_000;
const MAX_CACHED = 1000;

/**
 * Where the first start of an image should go when no node holds it as a template: the
 * node holding the most bytes of its layers (a task image shares its base with images started
 * before), so the start fetches the least. The layers come from a node (it reads the image's
 * manifest with its own registry settings), the holders from Redis (cluster.p2p publishes
 * them). Without p2p nobody publishes holders, and no preference is made.
 */
export class ContentPlacement {
  private readonly cache = new Map<string, { at: number; layers: Promise<Layers | undefined> }>();

  constructor(private readonly d: { view: ClusterView; apiKey: string; log: Logger }) {}

  private layers(node: NodeInfo, ref: string, cold: boolean): Promise<Layers | undefined> {
    const key = `${cold ? "1" : "0"} ${ref}`;
    const hit = this.cache.get(key);
    if (hit && performance.now() - hit.at < LAYERS_TTL_MS) return hit.layers;
    const path = `/cluster/image-layers?ref=${encodeURIComponent(ref)}&cold=${cold ? "1" : "0"}`;
    const layers = call(node.url, "GET", path, { "x-api-key": this.d.apiKey }, undefined, 15_000).then(
      (ans) => {
        const l = ans.status === 200 ? parseJson<Layers>(ans.body) : undefined;
        return Array.isArray(l) ? l : undefined;
      },
      () => undefined,
    );
    this.cache.delete(key);
    this.cache.set(key, { at: performance.now(), layers });
    if (this.cache.size > MAX_CACHED) {
      const oldest = this.cache.keys().next().value;
      if (oldest !== undefined) this.cache.delete(oldest);
    }
    return layers;
  }

  /** The ready nodes that hold the most of `ref`'s layer bytes; empty when none holds any. */
  async prefer(ref: string, cold: boolean, nodes: NodeInfo[]): Promise<string[]> {
    const ready = nodes.filter((n) => n.status === "ready");
    const asked = ready[Math.floor(Math.random() * ready.length)];
    if (!asked) return [];
    const layers = await this.layers(asked, ref, cold);
    if (!layers?.length) return [];
    const holders = await this.d.view.blobHolders(layers.map((l) => l.digest));
    const held = new Map<string, number>();
    layers.forEach((l, i) => {
      for (const n of holders[i] ?? []) held.set(n, (held.get(n) ?? 0) + l.size);
    });
    const live = new Set(ready.map((n) => n.nodeID));
    const ranked = [...held].filter(([n]) => live.has(n)).sort((a, b) => b[1] - a[1]);
    const best = ranked[0];
    if (!best) return [];
    const total = layers.reduce((s, l) => s + l.size, 0);
    const prefer = ranked.filter(([, b]) => b === best[1]).map(([n]) => n);
    this.d.log.info({ image: ref, prefer, heldBytes: best[1], imageBytes: total }, "placing by shared content");
    return prefer;
  }
}
