/** A node's membership of a cluster: its Redis, its ID and the URL gateways reach it at. */
import { hostname } from "node:os";
import { ConfigError } from "@aenv/edge/config-values";
import { parseRedisTarget, type RedisTarget, RedisTargetError, redisPasswordsFromEnv } from "@aenv/edge/redis-target";
import type { Reader } from "./reader.js";

export interface ClusterConfig {
  /** The cluster's Redis: a URL, or a primary found through Sentinel. */
  redis: RedisTarget;
  nodeId: string;
  /** Where gateways reach this node (default http://LISTEN). */
  advertiseUrl: string;
  /** Image layers are fetched from other nodes that hold them before the registry (off by default). */
  p2p: boolean;
}

/** What the command line gave (it wins over the environment and the file). */
export interface ClusterFlags {
  cluster?: string;
  /** --cluster-sentinels HOST:PORT,… and --cluster-master NAME: Redis through Sentinel. */
  clusterSentinels?: string;
  clusterMaster?: string;
  nodeId?: string;
  advertiseUrl?: string;
}

/** The cluster settings; undefined when no Redis is named (a single node). */
export function clusterConfig(
  r: Reader,
  flags: ClusterFlags,
  env: NodeJS.ProcessEnv,
  listen: { host: string; port: number },
): ClusterConfig | undefined {
  let redis: RedisTarget | undefined;
  try {
    redis = parseRedisTarget({
      url: flags.cluster ?? r.str("AENV_CLUSTER", "cluster.redis"),
      sentinels: flags.clusterSentinels ?? r.str("AENV_CLUSTER_SENTINELS", "cluster.sentinels"),
      masterName: flags.clusterMaster ?? r.str("AENV_CLUSTER_MASTER", "cluster.master_name"),
      ...redisPasswordsFromEnv(env),
    });
  } catch (err) {
    if (err instanceof RedisTargetError) throw new ConfigError(err.message);
    throw err;
  }
  if (!redis) return undefined;
  const nodeId = flags.nodeId ?? r.str("AENV_NODE_ID", "cluster.node_id") ?? hostname();
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/.test(nodeId)) throw new ConfigError(`invalid node ID "${nodeId}"`);
  const advertiseHost = listen.host === "0.0.0.0" ? "127.0.0.1" : listen.host;
  return {
    redis,
    nodeId,
    advertiseUrl:
      flags.advertiseUrl ??
      r.str("AENV_ADVERTISE_URL", "cluster.advertise_url") ??
      `http://${advertiseHost}:${listen.port}`,
    p2p: r.bool("AENV_P2P", "cluster.p2p", false),
  };
}
