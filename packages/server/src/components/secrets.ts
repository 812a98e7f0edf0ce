import { keys } from "@aenv/edge/cluster-keys";
import { RedisRecordStore } from "@aenv/edge/record-store";
import { openRedis } from "@aenv/edge/redis-target";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import type { NodePaths } from "../node-paths.js";
import { SealedSecretRecords } from "../secrets/sealed-records.js";
import { SecretSealer } from "../secrets/sealing.js";
import { SecretStore } from "../secrets/store.js";
import type { Component } from "./component.js";

export interface SecretsComponent extends Component {
  secrets: SecretStore;
}

/** How often a cluster node reads the secrets again (what another node changed is used after). */
const REFRESH_MS = 1_000;

/**
 * Project secrets: the node's own file (DATA/secrets/secrets.json, 0600), or in a cluster one
 * Redis hash every node shares, values sealed under a key derived from the repository key
 * (which every node of a cluster holds and gateways do not need).
 */
export async function startSecrets(cfg: ServerConfig, paths: NodePaths, log: Logger): Promise<SecretsComponent> {
  const opts = { requireBinding: cfg.secretsRequireBinding };
  if (!cfg.cluster) return { secrets: await SecretStore.inFolder(paths.secrets, opts), stop: async () => {} };
  const redis = await openRedis(cfg.cluster.redis, log, { wait: false, commandTimeoutMs: 5000 });
  const slog = log.child({ component: "secrets" });
  const records = new SealedSecretRecords(
    new RedisRecordStore(redis, keys.secrets),
    new SecretSealer(cfg.repository.key),
    (id, err) =>
      slog.error(
        { secretID: id, err: err.message },
        "a secret's value does not open with this cluster's key: left out",
      ),
  );
  const secrets = new SecretStore(records, opts);
  await secrets.refresh().catch((err: Error) => slog.warn({ err: err.message }, "secrets not read yet"));
  let failing = false;
  // While Redis cannot be read, the last view serves the egress proxy.
  const timer = setInterval(() => {
    secrets.refresh().then(
      () => {
        failing = false;
      },
      (err: Error) => {
        if (!failing) slog.warn({ err: err.message }, "secrets not read again; the last read serves");
        failing = true;
      },
    );
  }, REFRESH_MS);
  timer.unref();
  return {
    secrets,
    async stop() {
      clearInterval(timer);
      redis.disconnect();
    },
  };
}
