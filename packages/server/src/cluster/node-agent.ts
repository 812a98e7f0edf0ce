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
 * One heartbeat, atomically: the node key stamped with Redis's clock, its checkpoint key, and
 * the routes of the sandboxes it holds. A route is (re)written only when it is missing, already
 * this node's, or names a node whose heartbeat expired: a node never takes a sandbox back from
 * a live node that resumed it. Returns the IDs another live node owns.
 *   KEYS: node key, nodes set, checkpoint-keys hash, then one aenv:sbx key per owned sandbox
 *   ARGV: nodeId, info JSON (without updatedAt), TTL ms, checkpoint key, node-key prefix
 */
const BEAT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = string.sub(ARGV[2], 1, -2) .. ',"updatedAt":' .. now .. '}'
redis.call('SET', KEYS[1], info, 'PX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
local others = {}
for i = 4, #KEYS do
  local cur = redis.call('GET', KEYS[i])
  if (not cur) or cur == ARGV[1] or redis.call('EXISTS', ARGV[5] .. cur) == 0 then
    redis.call('SET', KEYS[i], ARGV[1])
  else
    others[#others + 1] = KEYS[i]
  end
end
return others
`;

/** Coalesces change-driven beats: one at most this often beyond the periodic one. */
const NUDGE_MS = 50;

/**
 * A node's presence in the cluster: an expiring heartbeat key with its load and capacity, and
 * the sandboxes it owns, republished every beat (so a Redis restart loses nothing for long).
 * A change in what it holds (a sandbox stopped) is published at once, not at the next beat.
 */
export class NodeAgent {
  private timer: NodeJS.Timeout | undefined;
  private nudged: NodeJS.Timeout | undefined;
  private beating: Promise<void> = Promise.resolve();
  private warned = new Set<string>();
  private stopped = false;

  constructor(private readonly d: NodeAgentDeps) {}

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => this.beatSafely(), HEARTBEAT_MS);
    this.timer.unref();
  }

  /** Publishes the node's state soon (coalesced): capacity freed is usable at once. */
  nudge(): void {
    if (this.nudged || this.stopped) return;
    this.nudged = setTimeout(() => {
      this.nudged = undefined;
      this.beatSafely();
    }, NUDGE_MS);
    this.nudged.unref();
  }

  private beatSafely(): void {
    if (this.stopped) return;
    this.beating = this.beating
      .then(() => this.beat())
      .catch((err) => this.d.log.warn({ err }, "cluster heartbeat failed"));
  }

  async beat(): Promise<void> {
    const info = this.d.describe();
    const owned = this.d.owned();
    const others = (await this.d.redis.eval(
      BEAT,
      3 + owned.length,
      keys.node(this.d.nodeId),
      keys.nodes,
      keys.checkpointKeys,
      ...owned.map(keys.sandbox),
      this.d.nodeId,
      JSON.stringify(info),
      NODE_TTL_MS,
      info.checkpointKey,
      keys.node(""),
    )) as string[];
    for (const k of others) {
      if (this.warned.has(k)) continue;
      this.warned.add(k);
      this.d.log.warn({ route: k }, "a sandbox this node holds is routed to another live node; not taking it back");
    }
  }

  /** A sandbox that is gone (killed, expired) is no longer routed here. */
  async forget(sandboxId: string): Promise<void> {
    // Only if it is still ours: another node may have resumed it meanwhile.
    const owner = await this.d.redis.get(keys.sandbox(sandboxId));
    if (owner === this.d.nodeId) await this.d.redis.del(keys.sandbox(sandboxId));
  }

  /** Leaves the cluster: no more heartbeats, the node key removed at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.nudged) clearTimeout(this.nudged);
    await this.beating;
    await this.d.redis.del(keys.node(this.d.nodeId)).catch(() => undefined);
  }
}
