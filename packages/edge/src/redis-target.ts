import type { Redis, RedisOptions } from "ioredis";
import type { Logger } from "pino";

/**
 * Where the cluster's state lives: one Redis at a URL (a single server, or a managed Redis
 * whose endpoint follows its primary), or a primary found through Redis Sentinel, which the
 * client follows across failovers by itself.
 */
export type RedisTarget =
  | { kind: "url"; url: string }
  | {
      kind: "sentinel";
      sentinels: Array<{ host: string; port: number }>;
      /** The name the sentinels monitor the primary under (`sentinel monitor NAME …`). */
      masterName: string;
      /** The primary's and replicas' `requirepass`. */
      password?: string;
      /** The sentinels' own `requirepass`, where they have one. */
      sentinelPassword?: string;
    };

/** The raw settings, from flags, environment or the config file; which names they came under is for messages. */
export interface RedisTargetInput {
  url?: string;
  sentinels?: string;
  masterName?: string;
  password?: string;
  sentinelPassword?: string;
}

/** The passwords, from the environment only: never a flag (visible in ps) or the config file. */
export function redisPasswordsFromEnv(env: NodeJS.ProcessEnv): Pick<RedisTargetInput, "password" | "sentinelPassword"> {
  return {
    password: env.AENV_CLUSTER_PASSWORD || undefined,
    sentinelPassword: env.AENV_CLUSTER_SENTINEL_PASSWORD || undefined,
  };
}

/** A setting that cannot work; the message names the flag and variable to fix. */
export class RedisTargetError extends Error {}

const URL_FORM = /^rediss?:\/\/[^\s]+$/;
const MASTER_NAME = /^[A-Za-z0-9._-]{1,64}$/;

function parseSentinel(entry: string): { host: string; port: number } {
  // HOST:PORT, or [IPv6]:PORT.
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(entry);
  const port = m ? Number(m[3]) : 0;
  if (!m || port < 1 || port > 65535) {
    throw new RedisTargetError(
      `--cluster-sentinels (AENV_CLUSTER_SENTINELS) expects HOST:PORT[,HOST:PORT…], got "${entry}"`,
    );
  }
  return { host: (m[1] ?? m[2]) as string, port };
}

/**
 * The Redis a node or gateway uses, or undefined when none is set (a node then runs alone).
 * Checked at start, so a typo stops the process with a message rather than retrying forever.
 */
export function parseRedisTarget(i: RedisTargetInput): RedisTarget | undefined {
  const sentinelList = i.sentinels?.trim();
  if (i.url && sentinelList) {
    throw new RedisTargetError(
      "--cluster (AENV_CLUSTER, a Redis URL) and --cluster-sentinels (AENV_CLUSTER_SENTINELS) both set: give one",
    );
  }
  if (i.masterName && !sentinelList) {
    throw new RedisTargetError(
      "--cluster-master (AENV_CLUSTER_MASTER) names a Sentinel master: it needs --cluster-sentinels HOST:PORT,…",
    );
  }
  if (i.url) {
    if (!URL_FORM.test(i.url)) throw new RedisTargetError(`--cluster expects redis://HOST:PORT, got "${i.url}"`);
    if (i.password || i.sentinelPassword) {
      throw new RedisTargetError(
        "AENV_CLUSTER_PASSWORD and AENV_CLUSTER_SENTINEL_PASSWORD are for Sentinel; a URL carries its password (redis://:PASSWORD@HOST:PORT)",
      );
    }
    return { kind: "url", url: i.url };
  }
  if (!sentinelList) return undefined;
  const sentinels = sentinelList.split(",").map((s) => parseSentinel(s.trim()));
  const seen = new Set<string>();
  for (const s of sentinels) {
    const k = `${s.host}:${s.port}`;
    if (seen.has(k)) throw new RedisTargetError(`--cluster-sentinels lists ${k} twice`);
    seen.add(k);
  }
  if (!i.masterName) {
    throw new RedisTargetError(
      "--cluster-sentinels needs --cluster-master (AENV_CLUSTER_MASTER): the name the sentinels monitor the primary under",
    );
  }
  if (!MASTER_NAME.test(i.masterName)) {
    throw new RedisTargetError(`--cluster-master: "${i.masterName}" is not a Sentinel master name`);
  }
  return {
    kind: "sentinel",
    sentinels,
    masterName: i.masterName,
    ...(i.password ? { password: i.password } : {}),
    ...(i.sentinelPassword ? { sentinelPassword: i.sentinelPassword } : {}),
  };
}

/** For logs: where the state is, without any password. */
export function describeRedisTarget(t: RedisTarget): string {
  if (t.kind === "sentinel") {
    return `sentinel ${t.masterName} via ${t.sentinels.map((s) => `${s.host}:${s.port}`).join(",")}`;
  }
  try {
    const u = new URL(t.url);
    return `${u.protocol}//${u.host}${u.pathname === "/" ? "" : u.pathname}`;
  } catch {
    return "redis";
  }
}

/**
 * Whether an error from a Redis command means "the state is unreachable for now" (no
 * connection, retries used up during a failover, a primary demoted under the client, a
 * replica still loading) rather than a bug in a command or script (any other error reply).
 */
export function isRedisUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name !== "ReplyError") return true;
  return /^(READONLY|LOADING|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|NOREPLICAS|BUSY)\b/.test(err.message);
}

function optionsFor(t: RedisTarget): RedisOptions {
  const common: RedisOptions = {
    // A command waits through two reconnects at most, then fails: callers answer 503 at once
    // rather than hold a request for the length of a failover.
    maxRetriesPerRequest: 2,
    // A primary demoted while connected (a Sentinel or managed failover) answers writes with
    // READONLY: reconnect, which finds the new primary, and send the command again there.
    reconnectOnError: (err) => (err.message.startsWith("READONLY") ? 2 : false),
  };
  if (t.kind === "url") return common;
  return {
    ...common,
    sentinels: t.sentinels,
    name: t.masterName,
    ...(t.password ? { password: t.password } : {}),
    ...(t.sentinelPassword ? { sentinelPassword: t.sentinelPassword } : {}),
    // Not ioredis's failoverDetector: its +switch-master subscription outlives the connection
    // to a dead primary, and the message arriving while the client is reconnecting aborts
    // that attempt and ends the client for good (seen here with the primary killed -9). A
    // demoted primary that stays up answers writes READONLY, and the reconnect above follows.
  };
}

/**
 * A client for the target. With `wait`, connected before it returns (a node does not start
 * without its state); otherwise connecting in the background (a gateway serves its health
 * check as 503 until Redis answers). Connection errors are logged, not thrown: the client
 * reconnects on its own, through the sentinels to whichever server is primary now. With
 * `commandTimeoutMs`, a command without an answer by then fails (a connection cut off without
 * a reset otherwise holds every command until TCP gives up, minutes later).
 * Loaded on demand: a single node never needs the library.
 */
export async function openRedis(
  t: RedisTarget,
  log: Logger,
  o: { wait: boolean; commandTimeoutMs?: number },
): Promise<Redis> {
  const { Redis: RedisClient } = await import("ioredis");
  const opts: RedisOptions = {
    ...optionsFor(t),
    lazyConnect: o.wait,
    ...(o.commandTimeoutMs ? { commandTimeout: o.commandTimeoutMs } : {}),
  };
  const redis = t.kind === "url" ? new RedisClient(t.url, opts) : new RedisClient(opts);
  redis.on("error", (err: Error) => log.warn({ err: err.message }, "redis"));
  if (o.wait) await redis.connect();
  return redis;
}
