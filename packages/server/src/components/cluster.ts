import type { NodeInfo } from "@aenv/edge/cluster-keys";
import { describeRedisTarget, openRedis } from "@aenv/edge/redis-target";
import type { Logger } from "pino";
import { NodeAgent } from "../cluster/node-agent.js";
import { RedisPeerBlobs } from "../cluster/peer-blobs.js";
import { RedisPeerChunks } from "../cluster/peer-chunks.js";
import { RedisPausePeers } from "../cluster/peer-pauses.js";
import type { ServerConfig } from "../config.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import type { Component } from "./component.js";

export interface ClusterMember extends Component {
  /** Publishes the node now (a draining node, before it pauses its sandboxes). */
  beat(): Promise<void>;
  /** Layer blobs from the other nodes (with cluster.p2p). */
  peers?: RedisPeerBlobs;
  /** Snapshot chunks from the other nodes (with cluster.p2p). */
  chunkPeers?: RedisPeerChunks;
  /** Pauses whose commit has not finished, between the nodes (with cluster.p2p). */
  pausePeers?: RedisPausePeers;
}

/** The node in its cluster: registered in Redis, its heartbeat and sandbox ownership kept there. */
export async function joinCluster(
  c: NonNullable<ServerConfig["cluster"]>,
  describe: () => Omit<NodeInfo, "updatedAt">,
  orch: Orchestrator,
  log: Logger,
  apiKey: string,
): Promise<ClusterMember> {
  // The client library is loaded there: a single node (the common case) never needs it (~0.1 s).
  const redis = await openRedis(c.redis, log, { wait: true });
  const agent = new NodeAgent({
    redis,
    nodeId: c.nodeId,
    describe,
    owned: () => orch.list().map((r) => r.id),
    superseded: async (moved) => {
      await orch.supersede(moved);
    },
    log: log.child({ component: "cluster" }),
  });
  // Fencing: while the node's lease has lapsed it resumes and takes over nothing.
  orch.fence(() => agent.leaseCurrent());
  // Room freed by a kill or pause is published at once, not at the next beat.
  orch.onKilled((id) => {
    void agent
      .forget(id)
      .then(() => agent.nudge())
      .catch(() => {});
  });
  orch.onStopped(() => agent.nudge());
  await agent.start();
  log.info({ nodeId: c.nodeId, url: c.advertiseUrl, redis: describeRedisTarget(c.redis) }, "joined the cluster");
  const p2p = { redis, nodeId: c.nodeId, apiKey, log: log.child({ component: "p2p" }) };
  const peers = c.p2p ? new RedisPeerBlobs(p2p) : undefined;
  const chunkPeers = c.p2p ? new RedisPeerChunks(p2p) : undefined;
  const pausePeers = c.p2p ? new RedisPausePeers({ ...p2p, url: c.advertiseUrl }) : undefined;
  return {
    beat: () => agent.beat(),
    ...(peers ? { peers } : {}),
    ...(chunkPeers ? { chunkPeers } : {}),
    ...(pausePeers ? { pausePeers } : {}),
    async stop() {
      await agent.stop();
      await redis.quit().catch(() => {});
    },
  };
}
