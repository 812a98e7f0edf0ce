import { randomBytes } from "node:crypto";
import { keys } from "@aenv/edge/cluster-keys";
import { DEFAULT_WINDOW_S, limitRules } from "@aenv/edge/limit-rules";
import type { Tenant } from "@aenv/edge/tenants";
import type { Redis } from "ioredis";

/**
 * A key's room for `n` more sandboxes, cluster-wide and atomic across gateways. Running ones are
 * what the nodes' latest heartbeats count per key (`owners`); beside them, creates this key
 * has in flight (`r|`, dropped after 2 minutes if a gateway died holding one) and creates
 * answered since (`a|`, until every live node has beaten after the answer, so its count
 * includes them). Creates a second are a token bucket in a hash. All times are Redis's.
 *   KEYS: nodes set, pending zset, bucket hash
 *   ARGV: key ID, max sandboxes (-1: none), n, member, creates a second (-1: none)
 *   → {1} | {0, 'sandboxes', running, pending} | {0, 'rate', seconds to wait}
 */
const RESERVE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local max = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local rate = tonumber(ARGV[5])
if max >= 0 then
  local running = 0
  local oldest = nil
  for _, nid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    local raw = redis.call('GET', 'aenv:node:' .. nid)
    if raw then
      local node = cjson.decode(raw)
      if oldest == nil or node.updatedAt < oldest then oldest = node.updatedAt end
      if type(node.owners) == 'table' and node.owners[id] then running = running + node.owners[id] end
    end
  end
  local pending = 0
  local entries = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local m = entries[i]
    local score = tonumber(entries[i + 1])
    local kind, cnt = string.match(m, '^(%a)|[^|]*|(%d+)$')
    local drop
    if kind == 'r' then drop = score < now - 120000 else drop = oldest == nil or oldest - 100 > score end
    if drop then redis.call('ZREM', KEYS[2], m) else pending = pending + (tonumber(cnt) or 0) end
  end
  if running + pending + n > max then return {0, 'sandboxes', running, pending} end
end
if rate > 0 then
  local b = redis.call('HMGET', KEYS[3], 'tokens', 'at')
  local cap = math.max(1, rate)
  local tokens = tonumber(b[1]) or cap
  local at = tonumber(b[2]) or now
  tokens = math.min(cap, tokens + (now - at) / 1000 * rate)
  if tokens < n then return {0, 'rate', math.ceil((n - tokens) / rate)} end
  redis.call('HSET', KEYS[3], 'tokens', tostring(tokens - n), 'at', now)
  redis.call('PEXPIRE', KEYS[3], 3600000)
end
if max >= 0 then
  redis.call('ZADD', KEYS[2], now, 'r|' .. ARGV[4] .. '|' .. n)
  redis.call('PEXPIRE', KEYS[2], 120000)
end
return {1}
`;

/**
 * A reservation ends: gone, and with `created` sandboxes counted as answered until the nodes'
 * heartbeats count them.   KEYS: pending zset; ARGV: member, n, created
 */
const RELEASE = `
redis.call('ZREM', KEYS[1], 'r|' .. ARGV[1] .. '|' .. ARGV[2])
if tonumber(ARGV[3]) > 0 then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[1], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), 'a|' .. ARGV[1] .. '|' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], 120000)
end
return 1
`;

/** Which calls about one sandbox may run more of its key's sandboxes: a fork, or a resume. */
export function keyHolds(t: Tenant, method: string, rest: string): "fork" | "resume" | undefined {
  const l = t.limits;
  if (!l || method !== "POST" || (l.maxSandboxes === undefined && !l.createsPerSecond)) return undefined;
  if (rest === "/fork") return "fork";
  if ((rest === "/connect" || rest === "/resume") && l.maxSandboxes !== undefined) return "resume";
  return undefined;
}

/** The children a fork body asks for (E2B's default 1; a bad body is the node's to refuse). */
export function forkCount(body: Buffer): number {
  try {
    const n = (JSON.parse(body.toString() || "{}") as { count?: unknown }).count;
    return typeof n === "number" && Number.isInteger(n) && n > 0 && n <= 100 ? n : 1;
  } catch {
    return 1;
  }
}

const pendingKey = (id: string) => `aenv:keypending:${id}`;
const bucketKey = (id: string) => `aenv:keybucket:${id}`;
const callsKey = (id: string, window: number) => `aenv:keycalls:${id}:${window}`;

/** API keys' limits held for the whole cluster by its gateways, in Redis (a node alone: @aenv/server's tenancy/limits.ts). */
export class ClusterKeyLimits {
  constructor(private readonly redis: Redis) {}

  /** One API call of `t`: refused past its calls per window (windows by this gateway's clock). */
  async call(t: Tenant): Promise<void> {
    const l = t.limits;
    if (!l?.callsPerWindow) return;
    const span = (l.windowSeconds ?? DEFAULT_WINDOW_S) * 1000;
    const now = Date.now();
    const window = Math.floor(now / span);
    const key = callsKey(t.id, window);
    const r = await this.redis
      .multi()
      .incr(key)
      .pexpire(key, span * 2)
      .exec();
    const count = Number(r?.[0]?.[1] ?? 0);
    if (count > l.callsPerWindow) throw limitRules.calls(t, Math.max(1, Math.ceil(((window + 1) * span - now) / 1000)));
  }

  /**
   * Room for `n` sandboxes more of `t` (creates, fork children, a resume); the returned
   * function ends the reservation with how many were made. `creates: false` (a resume) takes
   * no token of the creates a second.
   */
  async reserve(t: Tenant, n: number, o: { creates?: boolean } = {}): Promise<(created: number) => Promise<void>> {
    const l = t.limits;
    const none = async () => {};
    const rate = o.creates === false ? undefined : l?.createsPerSecond;
    if (!l || n <= 0 || (l.maxSandboxes === undefined && !rate)) return none;
    const member = randomBytes(8).toString("hex");
    const ans = (await this.redis.eval(
      RESERVE,
      3,
      keys.nodes,
      pendingKey(t.id),
      bucketKey(t.id),
      t.id,
      String(l.maxSandboxes ?? -1),
      String(n),
      member,
      String(rate ?? -1),
    )) as [number, string?, number?, number?];
    if (ans[0] !== 1) {
      if (ans[1] === "rate") throw limitRules.creates(t, Math.max(1, Number(ans[2] ?? 1)));
      throw limitRules.sandboxes(t, Number(ans[2] ?? 0), Number(ans[3] ?? 0), n) ?? limitRules.creates(t, 1);
    }
    if (l.maxSandboxes === undefined) return none;
    let done = false;
    return async (created) => {
      if (done) return;
      done = true;
      await this.redis.eval(RELEASE, 1, pendingKey(t.id), member, String(n), String(created));
    };
  }
}
