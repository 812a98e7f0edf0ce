import { HEARTBEAT_MS, keys, NODE_TTL_MS, type NodeInfo } from "@aenv/edge/cluster-keys";
import type { Redis } from "ioredis";
import type { Logger } from "pino";

export interface NodeAgentDeps {
  redis: Redis;
  nodeId: string;
  /** The node's view of itself now (sandboxes, load, templates). */
  describe: () => Omit<NodeInfo, "updatedAt">;
  /** IDs of every sandbox it holds, running or paused. */
  owned: () => string[];
  /**
   * Sandboxes this node holds whose route names another live node (sandbox ID → that node):
   * the node drops its copies the other node took over (fencing after a partition). Called
   * after a beat that found any, never twice at once; those it keeps come back next time.
   */
  superseded?: (routes: Map<string, string>) => Promise<void>;
  log: Logger;
}

/**
 * One heartbeat, atomically: the node key stamped with Redis's clock, its checkpoint key, and
 * the routes of the sandboxes it passes. A route is (re)written only when it is missing, already
 * this node's, or names a node whose heartbeat expired: a node never takes a sandbox back from
 * a live node that resumed it. Returns whether the node key existed before, then, for each route
 * another live node owns, its key and that node.
 *   KEYS: node key, nodes set, checkpoint-keys hash, then one aenv:sbx key per route passed
 *   ARGV: nodeId, info JSON (without updatedAt), TTL ms, checkpoint key, node-key prefix
 */
const BEAT = `
local had = redis.call('EXISTS', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local info = string.sub(ARGV[2], 1, -2) .. ',"updatedAt":' .. now .. '}'
redis.call('SET', KEYS[1], info, 'PX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
local out = { had }
for i = 4, #KEYS do
  local cur = redis.call('GET', KEYS[i])
  if (not cur) or cur == ARGV[1] or redis.call('EXISTS', ARGV[5] .. cur) == 0 then
    redis.call('SET', KEYS[i], ARGV[1])
  else
    out[#out + 1] = KEYS[i]
    out[#out + 1] = cur
  end
end
return out
`;

/**
 * How often a beat passes every route the node holds, not only those it has not published
 * yet. Routes change otherwise only by a create, a kill or a move, each of which writes them,
 * so this is a repair for what nothing else would notice; a Redis restart or an expired node
 * key (the script reports the key was gone) gets a full beat at once. Passing every route
 * every beat cost Redis a GET and a SET per sandbox of the cluster every 2 s: at 10,000
 * sandboxes most of its commands (bench/cluster-scale.ts).
 */
const FULL_BEAT_MS = 30_000;

/**
 * A beat with no answer by then makes the client reconnect. A connection cut off without a
 * reset (a partition: packets dropped) would otherwise hold every later command until TCP
 * gave up, minutes; a new connection reaches Redis as soon as the network heals.
 */
const BEAT_ANSWER_MS = 3_000;

/** Coalesces change-driven beats: one at most this often beyond the periodic one. */
const NUDGE_MS = 50;

/**
 * A node's presence in the cluster: an expiring heartbeat key with its load and capacity, and
 * the routes of the sandboxes it owns: each beat those it has not published yet, every
 * FULL_BEAT_MS all of them, and all at once after a Redis restart (so it loses nothing for long).
 * A change in what it holds (a sandbox stopped) is published at once, not at the next beat.
 */
export class NodeAgent {
  private timer: NodeJS.Timeout | undefined;
  private nudged: NodeJS.Timeout | undefined;
  private beating: Promise<void> = Promise.resolve();
  private warned = new Set<string>();
  private stopped = false;
  /** Sandboxes whose route a beat has passed since the last full one. */
  private published = new Set<string>();
  private lastFull = 0;
  /**
   * Until when (this process's monotonic clock) the node's lease holds: a beat sent at t set
   * the node key to expire NODE_TTL_MS after Redis ran it, so no later than t + NODE_TTL_MS by
   * this clock the gateways may have counted the node dead and moved its paused sandboxes.
   */
  private leaseUntil = 0;
  /** The lease had lapsed (or never held): the next successful beat reconciles. */
  private lapsed = true;
  private reconciling: Promise<void> | undefined;

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

  /** Marks (and logs, once) a lease that ran out: the next successful beat passes every route. */
  private noteLapse(): void {
    if (this.lapsed || this.leaseCurrent()) return;
    this.lapsed = true;
    this.d.log.warn("cluster lease lapsed (no heartbeat reached Redis in time): resuming nothing until it is renewed");
  }

  private beatSafely(): void {
    if (this.stopped) return;
    this.beating = this.beating
      .then(() => this.beat())
      .catch((err) => {
        this.d.log.warn({ err }, "cluster heartbeat failed");
        this.noteLapse();
      });
  }

  /**
   * Whether the node's last successful heartbeat is recent enough that no gateway can have
   * counted it dead: while it is not, the node resumes and takes over nothing (fencing).
   */
  leaseCurrent(): boolean {
    return performance.now() < this.leaseUntil;
  }

  async beat(): Promise<void> {
    // After a lapse every route goes in the beat: those another node took are found at once.
    this.noteLapse();
    const full = this.lapsed || Date.now() - this.lastFull >= FULL_BEAT_MS;
    const owned = this.d.owned();
    const gone = await this.publish(full ? owned : owned.filter((id) => !this.published.has(id)), full);
    // The node key was gone (Redis restarted, or this node's key expired): its routes may be too.
    if (gone && !full) await this.publish(this.d.owned(), true);
  }

  /** One beat passing these routes; resolves whether the node key was missing before it. */
  private async publish(routes: string[], full: boolean): Promise<boolean> {
    const info = this.d.describe();
    const startedAt = Date.now();
    const sent = performance.now();
    let watchdog: NodeJS.Timeout | undefined;
    // The beat fails then (the next one is not held behind it), and the client reconnects.
    const unanswered = new Promise<never>((_, reject) => {
      watchdog = setTimeout(() => {
        reject(new Error(`no answer from Redis in ${BEAT_ANSWER_MS} ms; reconnecting`));
        try {
          this.d.redis.disconnect(true);
        } catch (err) {
          this.d.log.warn({ err }, "redis reconnect after an unanswered beat failed");
        }
      }, BEAT_ANSWER_MS);
    });
    const [had, ...others] = (await Promise.race([
      this.d.redis.eval(
        BEAT,
        3 + routes.length,
        keys.node(this.d.nodeId),
        keys.nodes,
        keys.checkpointKeys,
        ...routes.map(keys.sandbox),
        this.d.nodeId,
        JSON.stringify(info),
        NODE_TTL_MS,
        info.checkpointKey,
        keys.node(""),
      ),
      unanswered,
    ]).finally(() => clearTimeout(watchdog))) as [number, ...string[]];
    // A beat sent while the lease held may be answered after it ran out: it lapsed all the
    // same, and this beat, not a full one, leaves the reconciliation to the next.
    this.noteLapse();
    this.leaseUntil = sent + NODE_TTL_MS;
    if (this.lapsed && full) {
      this.lapsed = false;
      if (this.lastFull > 0) this.d.log.warn("cluster lease renewed after it lapsed; reconciling what this node holds");
    }
    if (full) {
      this.published = new Set(routes);
      this.lastFull = startedAt;
    } else {
      for (const id of routes) this.published.add(id);
    }
    const moved = new Map<string, string>();
    for (let i = 0; i + 1 < others.length; i += 2) {
      moved.set((others[i] as string).slice(keys.sandbox("").length), others[i + 1] as string);
    }
    if (moved.size > 0) this.reconcile(moved);
    return had === 0;
  }

  /**
   * Sandboxes this node holds that another live node now serves: the node never takes their
   * routes back; the `superseded` hook drops the local copies the other node took over.
   */
  private reconcile(moved: Map<string, string>): void {
    for (const [id, owner] of moved) {
      if (this.warned.has(id)) continue;
      this.warned.add(id);
      this.d.log.warn(
        { sandboxID: id, owner },
        "a sandbox this node holds is routed to another live node; not taking it back",
      );
    }
    const hook = this.d.superseded;
    // In the background: stopping a sandbox must not hold the next beat back (the lease).
    if (!hook || this.reconciling) return;
    this.reconciling = hook(moved)
      .catch((err) => this.d.log.warn({ err }, "reconciling sandboxes routed elsewhere failed"))
      .finally(() => {
        this.reconciling = undefined;
      });
  }

  /** Resolves once a reconciliation under way (if any) is done (tests, shutdown). */
  async settled(): Promise<void> {
    await this.reconciling;
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
    await this.reconciling;
    await this.d.redis.del(keys.node(this.d.nodeId)).catch(() => undefined);
  }
}
