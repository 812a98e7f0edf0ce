/**
 * Every Redis key the cluster uses. Redis is a cache plus locks: all of it can be rebuilt
 * from the nodes (heartbeats, ownership republished every beat) and the repository.
 *
 *   aenv:node:{nodeId}       JSON NodeInfo, expires unless the node beats (TTL 3 × interval)
 *   aenv:nodes               set of node IDs ever seen (entries without a live key are dead)
 *   aenv:sbx:{sandboxId}     the node that owns it (running or paused there)
 *   aenv:reserved:{nodeId}   creates placed on the node and not yet answered (expires)
 *   aenv:answered:{nodeId}   creates answered, until a heartbeat newer than the answer counts them
 *   aenv:checkpoint-keys     hash nodeId → checkpoint key, kept after a node dies: a paused
 *                            sandbox or snapshot moves only to a node that can restore it
 *   aenv:snapshot:{name}     the node that took a snapshot (ID or name), for an hour: starts
 *                            from it go there first (its image is local, no fetch)
 *   aenv:lock:{name}         short locks (a resume moving a sandbox to another node)
 *   aenv:blob:{digest}       set of nodes holding an image layer blob (with cluster.p2p):
 *                            others fetch it from them before the registry
 *   aenv:tree:{digest}       hash node → sha256 of its index of an image's unpacked tree: the
 *                            nodes other nodes start the image from lazily (cluster.p2p)
 *   aenv:chunks:{id}         set of nodes whose chunk cache holds a repository manifest's chunks
 *                            (cluster.p2p): restores ask them before the repository
 *   aenv:pause:{sandboxId}   JSON {node, url, tag}: the node holding a paused sandbox's image
 *                            whose commit has not finished (cluster.p2p); another node that
 *                            resumes it before the commit ends takes its manifest from there
 *   aenv:apikeys             hash ID → API key record (its sha256, name, limits); not rebuilt:
 *                            keep Redis persistent (AOF) or re-create the keys after a loss
 *   aenv:secrets             hash ID → secret record, its value sealed under a key derived from
 *                            the repository key; not rebuilt (as aenv:apikeys)
 *   aenv:keypending:{id}     a key's creates in flight and just answered (@aenv/gateway's key-limits.ts)
 *   aenv:keybucket:{id}      a key's creates-a-second token bucket
 *   aenv:keycalls:{id}:{w}   a key's API calls in window w
 *
 * Times written by the cluster (`updatedAt`, reservation scores) are Redis's own clock
 * (TIME), so hosts with skewed clocks still agree on what came first.
 */
export const NODE_TTL_MS = 6_000;
export const HEARTBEAT_MS = 2_000;

export const keys = {
  node: (id: string) => `aenv:node:${id}`,
  nodes: "aenv:nodes",
  sandbox: (id: string) => `aenv:sbx:${id}`,
  reserved: (nodeId: string) => `aenv:reserved:${nodeId}`,
  answered: (nodeId: string) => `aenv:answered:${nodeId}`,
  checkpointKeys: "aenv:checkpoint-keys",
  snapshot: (name: string) => `aenv:snapshot:${name}`,
  lock: (name: string) => `aenv:lock:${name}`,
  /** The sandbox a create with this idempotency key made. */
  idempotent: (key: string) => `aenv:idem:${key}`,
  blob: (digest: string) => `aenv:blob:${digest}`,
  chunks: (manifestId: string) => `aenv:chunks:${manifestId}`,
  pause: (sandboxId: string) => `aenv:pause:${sandboxId}`,
  tree: (imageDigest: string) => `aenv:tree:${imageDigest}`,
  /** Hash of the cluster's API keys: ID → record (sha256 of the key, never the key). */
  apiKeys: "aenv:apikeys",
  /** Project secrets: hash ID → JSON record, its value sealed (the server's secrets/sealing.ts). */
  secrets: "aenv:secrets",
  /** Hash key ID → when it was last used (apart from the record: see tenants.ts). */
  apiKeyUses: "aenv:apikeys:used",
};

/** What a node publishes about itself every heartbeat (E2B's node shape is built from it). */
export interface NodeInfo {
  nodeID: string;
  /** Where gateways reach its API and proxy. */
  url: string;
  status: "ready" | "draining";
  /** Sandboxes running or starting, and the most it admits. */
  sandboxCount: number;
  capacity: number;
  /** Paused sandboxes it holds. */
  pausedCount: number;
  allocatedCPU: number;
  allocatedMemoryMiB: number;
  /** Checkpoints restore only between nodes with the same key. */
  checkpointKey: string;
  version: string;
  /** Template IDs with a local tree (placement prefers them). */
  templates: string[];
  /**
   * Sandboxes counted against their API key's concurrent ones (running, hibernated too), by
   * key ID; the operator's are not counted. Gateways sum them to hold a key's cap cluster-wide.
   */
  owners?: Record<string, number>;
  /** When Redis stored this heartbeat (Redis clock, ms). */
  updatedAt: number;
}
