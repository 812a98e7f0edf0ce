import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { RedisRecordStore } from "@aenv/edge/record-store";
import { openRedis } from "@aenv/edge/redis-target";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import { DeliveryLog } from "../events/delivery-log.js";
import { WEBHOOKS_FILE, WEBHOOKS_KEY, type WebhookRecord, type WebhookStore } from "../events/webhook-store.js";
import { Webhooks } from "../events/webhooks.js";
import type { NodePaths } from "../node-paths.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import { FileRecordStore } from "../util/file-record-store.js";
import type { Component } from "./component.js";

export interface WebhooksComponent extends Component {
  webhooks: Webhooks;
}

/**
 * Lifecycle webhooks: registered in the node's own file, or in a cluster's Redis (every node
 * delivers its own sandboxes' events to every webhook); deliveries queued in the node's SQLite.
 */
export async function startWebhooks(
  cfg: ServerConfig,
  paths: NodePaths,
  orch: Orchestrator,
  log: Logger,
): Promise<WebhooksComponent> {
  mkdirSync(paths.webhooks, { recursive: true, mode: 0o700 });
  let store: WebhookStore;
  let closeRedis = (): void => {};
  if (cfg.cluster) {
    // Its own connection, lazily connected: registering a webhook waits for Redis, a node's start does not.
    const redis = await openRedis(cfg.cluster.redis, log, { wait: false, commandTimeoutMs: 5000 });
    store = new RedisRecordStore<WebhookRecord>(redis, WEBHOOKS_KEY);
    closeRedis = () => redis.disconnect();
  } else store = new FileRecordStore<WebhookRecord>(paths.webhooks, WEBHOOKS_FILE);
  const webhooks = new Webhooks({
    store,
    deliveries: new DeliveryLog(join(paths.webhooks, "deliveries.db")),
    cfg: cfg.webhooks,
    log: log.child({ component: "webhooks" }),
  });
  orch.events.on((e) => webhooks.publish(e));
  webhooks.start();
  return {
    webhooks,
    async stop() {
      await webhooks.stop();
      closeRedis();
    },
  };
}
