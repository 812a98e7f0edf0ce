import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { keys, type NodeInfo } from "../cluster/keys.js";

/**
 * Reserves a create on a node, atomically: creates placed since the node's last heartbeat are
 * counted with the sandboxes it reported, and the reservation is refused when they would
 * reach its capacity. Reservations older than that heartbeat are already in its count.
 */
const RESERVE = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local node = cjson.decode(raw)
if node.status ~= 'ready' then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', node.updatedAt - 1000)
local pending = redis.call('ZCARD', KEYS[2])
if node.sandboxCount + pending >= node.capacity then return 0 end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], 120000)
return 1
`;

export interface Reservation {
  node: NodeInfo;
  /**
   * A create that failed gives its room back now; one that succeeded keeps it until the
   * node's next heartbeat counts the sandbox (the reserve script expires it then).
   */
  release(created: boolean): Promise<void>;
}

/** The gateway's read of the cluster: live nodes, who owns a sandbox, and placement. */
export class ClusterView {
  constructor(private readonly redis: Redis) {}

  async nodes(): Promise<NodeInfo[]> {
    const ids = await this.redis.smembers(keys.nodes);
    if (!ids.length) return [];
    const raw = await this.redis.mget(ids.map(keys.node));
    const out: NodeInfo[] = [];
    for (const r of raw) {
      if (!r) continue;
      try {
        out.push(JSON.parse(r) as NodeInfo);
      } catch {
        // a key another version wrote: skip it
      }
    }
    return out.sort((a, b) => a.nodeID.localeCompare(b.nodeID));
  }

  async node(id: string): Promise<NodeInfo | undefined> {
    const r = await this.redis.get(keys.node(id));
    return r ? (JSON.parse(r) as NodeInfo) : undefined;
  }

  /** The live node that owns a sandbox; `dead` names an owner whose heartbeat expired. */
  async owner(sandboxId: string): Promise<{ node?: NodeInfo; dead?: string }> {
    const id = await this.redis.get(keys.sandbox(sandboxId));
    if (!id) return {};
    const node = await this.node(id);
    return node ? { node } : { dead: id };
  }

  async setOwner(sandboxId: string, nodeId: string): Promise<void> {
    await this.redis.set(keys.sandbox(sandboxId), nodeId);
  }

  async dropOwner(sandboxId: string): Promise<void> {
    await this.redis.del(keys.sandbox(sandboxId));
  }

  /**
   * Picks a ready node with room: two at random, the less loaded wins (power of two choices),
   * preferring nodes that hold the template; then reserves room on it. Undefined when full.
   */
  async place(
    opts: { templateId?: string; checkpointKey?: string; exclude?: string[] } = {},
  ): Promise<Reservation | undefined> {
    const all = (await this.nodes()).filter(
      (n) =>
        n.status === "ready" &&
        !opts.exclude?.includes(n.nodeID) &&
        (!opts.checkpointKey || n.checkpointKey === opts.checkpointKey),
    );
    const load = (n: NodeInfo) => n.sandboxCount / Math.max(1, n.capacity);
    const warm = opts.templateId ? all.filter((n) => n.templates.includes(opts.templateId as string)) : [];
    const pools = warm.length ? [warm, all] : [all];
    const tried = new Set<string>();
    for (const pool of pools) {
      while (pool.some((n) => !tried.has(n.nodeID))) {
        const left = pool.filter((n) => !tried.has(n.nodeID));
        const a = left[Math.floor(Math.random() * left.length)] as NodeInfo;
        const b = left[Math.floor(Math.random() * left.length)] as NodeInfo;
        const pick = load(a) <= load(b) ? a : b;
        tried.add(pick.nodeID);
        const member = randomBytes(8).toString("hex");
        const ok = await this.redis.eval(
          RESERVE,
          2,
          keys.node(pick.nodeID),
          keys.reserved(pick.nodeID),
          Date.now(),
          member,
        );
        if (ok === 1) {
          return {
            node: pick,
            release: async (created) => {
              if (!created) await this.redis.zrem(keys.reserved(pick.nodeID), member);
            },
          };
        }
      }
    }
    return undefined;
  }

  /** A short lock (a resume moving a sandbox): true when this caller holds it. */
  async lock(name: string, ttlMs: number): Promise<() => Promise<void>> {
    const token = randomBytes(8).toString("hex");
    const deadline = Date.now() + ttlMs;
    for (;;) {
      const ok = await this.redis.set(keys.lock(name), token, "PX", ttlMs, "NX");
      if (ok === "OK") break;
      if (Date.now() > deadline) throw new Error(`lock ${name} is held`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return async () => {
      const cur = await this.redis.get(keys.lock(name));
      if (cur === token) await this.redis.del(keys.lock(name));
    };
  }
}
