import { keys } from "@aenv/edge/cluster-keys";
import { registerKeySandboxes } from "@aenv/edge/key-metrics";
import { RedisRecordStore } from "@aenv/edge/record-store";
import { openRedis } from "@aenv/edge/redis-target";
import { type ApiKeyRecord, type KeyUse, Tenants } from "@aenv/edge/tenants";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import type { SandboxRecord } from "../state/store.js";
import { LocalKeyLimits } from "../tenancy/limits.js";
import { FileRecordStore } from "../util/file-record-store.js";
import type { Component } from "./component.js";

export interface TenantsComponent extends Component {
  tenants: Tenants;
  /** A node of its own enforces keys' limits; in a cluster the gateways do. */
  keyLimits?: LocalKeyLimits;
}

const API_KEYS_FILE = "api-keys.json";
const API_KEY_USES_FILE = "api-keys-used.json";

/**
 * Each API key's sandboxes that count against its concurrent ones: running or starting
 * (hibernated too), not paused or being killed; the operator's are not counted.
 */
export function runningByOwner(recs: Iterable<Pick<SandboxRecord, "owner" | "state" | "pause">>): Map<string, number> {
  const n = new Map<string, number>();
  for (const r of recs) {
    if (!r.owner || r.state === "killing" || (r.state === "paused" && r.pause?.idleSaved !== true)) continue;
    n.set(r.owner, (n.get(r.owner) ?? 0) + 1);
  }
  return n;
}

/**
 * API keys: in the node's own file (DATA/secrets/api-keys.json, 0600), or a cluster's Redis so
 * that every node and gateway knows every key.
 */
export async function startTenants(
  cfg: ServerConfig,
  paths: NodePaths,
  orch: Orchestrator,
  log: Logger,
): Promise<TenantsComponent> {
  const onUseFailed = (err: Error) => log.warn({ err: err.message }, "API key lastUsed not written");
  registerKeySandboxes(() => runningByOwner(orch.list()));
  if (cfg.cluster) {
    const redis = await openRedis(cfg.cluster.redis, log, { wait: false, commandTimeoutMs: 5000 });
    const store = new RedisRecordStore<ApiKeyRecord>(redis, keys.apiKeys);
    const uses = new RedisRecordStore<KeyUse>(redis, keys.apiKeyUses);
    return { tenants: new Tenants(store, uses, cfg.apiKey, onUseFailed), stop: async () => redis.disconnect() };
  }
  const store = new FileRecordStore<ApiKeyRecord>(paths.secrets, API_KEYS_FILE);
  const uses = new FileRecordStore<KeyUse>(paths.secrets, API_KEY_USES_FILE);
  const running = (owner: string) => runningByOwner(orch.list()).get(owner) ?? 0;
  return {
    tenants: new Tenants(store, uses, cfg.apiKey, onUseFailed),
    keyLimits: new LocalKeyLimits(running),
    stop: async () => {},
  };
}
