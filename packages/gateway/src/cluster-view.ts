import { randomBytes } from "node:crypto";
import { keys, type NodeInfo } from "@aenv/edge/cluster-keys";
import { cachedFor } from "@aenv/edge/fresh";
import { isRedisUnavailable } from "@aenv/edge/redis-target";
import type { Redis } from "ioredis";

/**
 * The cluster's state cannot be read or written now (Redis down, or a failover under way):
 * the gateway answers 503 and the client may retry. Nothing was placed or moved.
 */
export class StateUnavailableError extends Error {
  constructor(cause: Error) {
    super(`the cluster's state (Redis) is unavailable, retry shortly: ${cause.message}`);
    this.name = "StateUnavailableError";
  }
}

/** A Redis call whose connection trouble becomes StateUnavailableError; a script's bug stays itself. */
function guard<T>(p: Promise<T>): Promise<T> {
  return p.catch((err: unknown) => {
    throw isRedisUnavailable(err) ? new StateUnavailableError(err as Error) : err;
  });
}

/**
 * Reserves a create on a node, atomically. The node's published count is stale by up to a
 * heartbeat, so creates placed on it since are counted too: those not answered yet
 * (`reserved`, dropped after 2 minutes if a gateway died holding one) and those answered
 * before its latest heartbeat could count them (`answered`, dropped once a heartbeat is
 * newer than the answer by a margin for the node's own bookkeeping). All times are Redis's.
 *   KEYS: node key, reserved zset, answered zset; ARGV: member
 */
const RESERVE = `
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local node = cjson.decode(raw)
if node.status ~= 'ready' then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 120000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', node.updatedAt - 100)
local pending = redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
if node.sandboxCount + pending >= node.capacity then return 0 end
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('PEXPIRE', KEYS[2], 120000)
return 1
`;

/**
 * A reservation answered: gone if nothing was created, else counted until a heartbeat counts
 * it; with a sandbox route (KEYS[3], ARGV[3] the node), the route is written in the same call.
 *   KEYS: reserved zset, answered zset[, sandbox route]; ARGV: member, created '1'/'0'[, node]
 */
const RELEASE = `
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[1])
  redis.call('PEXPIRE', KEYS[2], 120000)
end
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[3]) end
return 1
`;

/**
 * How long placement uses one read of the nodes. Room is decided inside Redis (RESERVE reads
 * the node's own key), so an older list only delays a node that just joined and tries, once,
 * one that just left; reading every node's record for each create cost the gateway two round
 * trips and a parse of every node per create.
 */
const PLACEMENT_NODES_MS = 500;

export interface Reservation {
  node: NodeInfo;
  /**
   * A create that failed gives its room back now; one that succeeded keeps it until a
   * heartbeat of the node counts the sandbox, and with `sandboxId` routes it to the node.
   */
  release(created: boolean, sandboxId?: string): Promise<void>;
}

/** Routes a gateway remembers for sandbox traffic while Redis cannot be read (see ownerForTraffic). */
export interface KnownRoutes {
  /** How long after its last read from Redis a route is still used; 0 turns this off. */
  maxAgeMs: number;
  /** How long a lookup waits for Redis before it settles for a known route. */
  waitMs: number;
  /** Routes kept at most (the least recently read go first). */
  max: number;
}

export const DEFAULT_KNOWN_ROUTES: KnownRoutes = { maxAgeMs: 30_000, waitMs: 1_000, max: 100_000 };

/** The gateway's read of the cluster: live nodes, who owns a sandbox, and placement. */
export class ClusterView {
  /** Sandbox ID → its node and when Redis last said so (performance.now()). */
  private readonly known = new Map<string, { node: NodeInfo; at: number }>();

  constructor(
    private readonly redis: Redis,
    private readonly routes: KnownRoutes = DEFAULT_KNOWN_ROUTES,
  ) {}

  private readonly placementRead = cachedFor(PLACEMENT_NODES_MS, () => this.nodes());

  /** The nodes as read at most PLACEMENT_NODES_MS ago (one read in flight at a time; a failed one not kept). */
  placementNodes(): Promise<NodeInfo[]> {
    return this.placementRead.get();
  }

  async nodes(): Promise<NodeInfo[]> {
    const ids = await guard(this.redis.smembers(keys.nodes));
    if (!ids.length) return [];
    const raw = await guard(this.redis.mget(ids.map(keys.node)));
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
    const r = await guard(this.redis.get(keys.node(id)));
    return r ? (JSON.parse(r) as NodeInfo) : undefined;
  }

  /** The live node that owns a sandbox; `dead` names an owner whose heartbeat expired. */
  async owner(sandboxId: string): Promise<{ node?: NodeInfo; dead?: string }> {
    const id = await guard(this.redis.get(keys.sandbox(sandboxId)));
    if (!id) {
      this.known.delete(sandboxId);
      return {};
    }
    const node = await this.node(id);
    if (node) this.remember(sandboxId, node);
    else this.known.delete(sandboxId);
    return node ? { node } : { dead: id };
  }

  /**
   * The live owners of many sandboxes at once (one read of the routes, one of the nodes): by
   * ID, the node; IDs without a route are left out, those whose node's heartbeat expired are
   * listed in `dead`.
   */
  async owners(sandboxIds: string[]): Promise<{ live: Map<string, NodeInfo>; dead: string[] }> {
    const live = new Map<string, NodeInfo>();
    const dead: string[] = [];
    if (!sandboxIds.length) return { live, dead };
    const [routes, nodes] = await Promise.all([guard(this.redis.mget(sandboxIds.map(keys.sandbox))), this.nodes()]);
    const byId = new Map(nodes.map((n) => [n.nodeID, n]));
    sandboxIds.forEach((id, i) => {
      const nodeId = routes[i];
      if (!nodeId) return;
      const node = byId.get(nodeId);
      if (node) live.set(id, node);
      else dead.push(id);
    });
    return { live, dead };
  }

  /**
   * The owner for sandbox traffic. While Redis does not answer (cut off, or failing over), a
   * route this gateway read within `maxAgeMs` is used, so running sandboxes keep being served;
   * the node itself decides what it serves (a node whose lease lapsed resumes nothing), so an
   * old route cannot make two nodes serve one sandbox. Without one, StateUnavailableError (503).
   * Everything else (placement, moves, locks) needs Redis.
   */
  async ownerForTraffic(sandboxId: string): Promise<{ node?: NodeInfo; dead?: string }> {
    const fresh = this.owner(sandboxId);
    const known = this.known.get(sandboxId);
    if (!known || this.routes.maxAgeMs <= 0) return fresh;
    let timer: NodeJS.Timeout | undefined;
    const slow = new Promise<"slow">((r) => {
      timer = setTimeout(() => r("slow"), this.routes.waitMs);
    });
    try {
      const first = await Promise.race([fresh, slow]);
      if (first !== "slow") return first;
    } catch (err) {
      if (!(err instanceof StateUnavailableError)) throw err;
    } finally {
      clearTimeout(timer);
    }
    // Redis failed or is slow: a recent enough route stands in; the late answer still updates it.
    fresh.catch(() => undefined);
    if (performance.now() - known.at > this.routes.maxAgeMs) return fresh;
    return { node: known.node };
  }

  private remember(sandboxId: string, node: NodeInfo): void {
    if (this.routes.maxAgeMs <= 0) return;
    this.known.delete(sandboxId);
    this.known.set(sandboxId, { node, at: performance.now() });
    if (this.known.size > this.routes.max) {
      const oldest = this.known.keys().next().value;
      if (oldest !== undefined) this.known.delete(oldest);
    }
  }

  async setOwner(sandboxId: string, nodeId: string): Promise<void> {
    await guard(this.redis.set(keys.sandbox(sandboxId), nodeId));
    this.known.delete(sandboxId);
  }

  async dropOwner(sandboxId: string): Promise<void> {
    this.known.delete(sandboxId);
    await guard(this.redis.del(keys.sandbox(sandboxId)));
  }

  /** Where a snapshot (by ID or name) was taken, for an hour: starts from it go there first. */
  async setSnapshotHolder(names: string[], nodeId: string): Promise<void> {
    const m = this.redis.multi();
    for (const n of names) m.set(keys.snapshot(n), nodeId, "EX", 3600);
    await guard(m.exec());
  }

  async snapshotHolder(name: string): Promise<string | undefined> {
    return (await guard(this.redis.get(keys.snapshot(name)))) ?? undefined;
  }

  /** For each layer digest, the nodes that hold its blob (cluster.p2p publishes them), in one round trip. */
  async blobHolders(digests: string[]): Promise<string[][]> {
    if (!digests.length) return [];
    const p = this.redis.pipeline();
    for (const d of digests) p.smembers(keys.blob(d));
    const res = (await guard(p.exec())) ?? [];
    return res.map(([err, v]) => (err || !Array.isArray(v) ? [] : (v as string[])));
  }

  /** The checkpoint key a node published, even after it died (what its images restore on). */
  async checkpointKeyOf(nodeId: string): Promise<string | undefined> {
    return (await guard(this.redis.hget(keys.checkpointKeys, nodeId))) ?? undefined;
  }

  /**
   * Picks a ready node with room and reserves it: among the `prefer`red nodes first (they hold
   * the snapshot), then those with the template's tree, then any; within a group two at
   * random and the less loaded wins (power of two choices). With `checkpointKey`, only nodes
   * that can restore such images. Undefined when no node has room.
   */
  async place(
    opts: { templateId?: string; checkpointKey?: string; prefer?: string[]; exclude?: string[] } = {},
  ): Promise<Reservation | undefined> {
    const all = (await this.placementNodes()).filter(
      (n) =>
        n.status === "ready" &&
        !opts.exclude?.includes(n.nodeID) &&
        (!opts.checkpointKey || n.checkpointKey === opts.checkpointKey),
    );
    const load = (n: NodeInfo) => n.sandboxCount / Math.max(1, n.capacity);
    const preferred = all.filter((n) => opts.prefer?.includes(n.nodeID));
    const warm = opts.templateId ? all.filter((n) => n.templates.includes(opts.templateId as string)) : [];
    const pools = [preferred, warm, all].filter((p) => p.length);
    const tried = new Set<string>();
    for (const pool of pools) {
      while (pool.some((n) => !tried.has(n.nodeID))) {
        const left = pool.filter((n) => !tried.has(n.nodeID));
        const a = left[Math.floor(Math.random() * left.length)] as NodeInfo;
        const b = left[Math.floor(Math.random() * left.length)] as NodeInfo;
        const pick = load(a) <= load(b) ? a : b;
        tried.add(pick.nodeID);
        const member = randomBytes(8).toString("hex");
        const ok = await guard(
          this.redis.eval(
            RESERVE,
            3,
            keys.node(pick.nodeID),
            keys.reserved(pick.nodeID),
            keys.answered(pick.nodeID),
            member,
          ),
        );
        if (ok === 1) {
          return {
            node: pick,
            release: async (created, sandboxId) => {
              const k = [keys.reserved(pick.nodeID), keys.answered(pick.nodeID)];
              const a = [member, created ? "1" : "0"];
              if (sandboxId) {
                this.known.delete(sandboxId);
                k.push(keys.sandbox(sandboxId));
                a.push(pick.nodeID);
              }
              await guard(this.redis.eval(RELEASE, k.length, ...k, ...a));
            },
          };
        }
      }
    }
    return undefined;
  }

  /** The sandbox a create with this idempotency key made, if one did. */
  async idempotentSandbox(key: string): Promise<string | undefined> {
    return (await guard(this.redis.get(keys.idempotent(key)))) ?? undefined;
  }

  /** Kept a week: past the longest sandbox lifetime; a node answers for a sandbox since gone. */
  async setIdempotentSandbox(key: string, sandboxId: string): Promise<void> {
    await guard(this.redis.set(keys.idempotent(key), sandboxId, "EX", 7 * 86_400));
  }

  /** A short lock (a resume moving a sandbox): true when this caller holds it. */
  async lock(name: string, ttlMs: number): Promise<() => Promise<void>> {
    const token = randomBytes(8).toString("hex");
    const deadline = Date.now() + ttlMs;
    for (;;) {
      const ok = await guard(this.redis.set(keys.lock(name), token, "PX", ttlMs, "NX"));
      if (ok === "OK") break;
      if (Date.now() > deadline) throw new Error(`lock ${name} is held`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return async () => {
      const cur = await guard(this.redis.get(keys.lock(name)));
      if (cur === token) await guard(this.redis.del(keys.lock(name)));
    };
  }
}
