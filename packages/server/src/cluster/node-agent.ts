import type { Redis } from "ioredis";
import type { Logger } from "pino";
import { HEARTBEAT_MS, keys, NODE_TTL_MS, type NodeInfo } from "./keys.js";

export interface NodeAgentDeps {
  redis: Redis;
  nodeId: string;
  /** The node's view of itself now (sandboxes, load, templates). */
  describe: () => Omit<NodeInfo, "updatedAt">;
  /** IDs of every sandbox it holds, running or paused. */
  owned: () => string[];
  log: Logger;
}

/**
 * A node's presence in the cluster: an expiring heartbeat key with its load and capacity, and
 * the sandboxes it owns, republished every beat (so a Redis restart loses nothing for long).
 */
export class NodeAgent {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> = Promise.resolve();

  constructor(private readonly d: NodeAgentDeps) {}

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => {
      this.beating = this.beat().catch((err) => this.d.log.warn({ err }, "cluster heartbeat failed"));
    }, HEARTBEAT_MS);
    this.timer.unref();
  }

  async beat(): Promise<void> {
    const info: NodeInfo = { ...this.d.describe(), updatedAt: Date.now() };
    const multi = this.d.redis.multi();
    multi.set(keys.node(this.d.nodeId), JSON.stringify(info), "PX", NODE_TTL_MS);
    multi.sadd(keys.nodes, this.d.nodeId);
    for (const id of this.d.owned()) multi.set(keys.sandbox(id), this.d.nodeId);
    await multi.exec();
  }

  /** A sandbox that is gone (killed, expired) is no longer routed here. */
  async forget(sandboxId: string): Promise<void> {
    // Only if it is still ours: another node may have resumed it meanwhile.
    const owner = await this.d.redis.get(keys.sandbox(sandboxId));
    if (owner === this.d.nodeId) await this.d.redis.del(keys.sandbox(sandboxId));
  }

  /** Leaves the cluster: no more heartbeats, the node key removed at once. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.beating;
    await this.d.redis.del(keys.node(this.d.nodeId)).catch(() => undefined);
  }
}
