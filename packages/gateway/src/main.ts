import { parseArgs } from "node:util";
import { parseListen } from "@aenv/edge/config-values";
import { httpLimitsFromEnv } from "@aenv/edge/http-config";
import { CLUSTER_FLAGS, installSafetyNet, stopOnSignals } from "@aenv/edge/process";
import {
  describeRedisTarget,
  openRedis,
  parseRedisTarget,
  type RedisTarget,
  RedisTargetError,
  redisPasswordsFromEnv,
} from "@aenv/edge/redis-target";
import pino from "pino";
import { buildGateway } from "./app.js";
import { DEFAULT_KNOWN_ROUTES, type KnownRoutes } from "./cluster-view.js";

const HELP = `aenv-gateway — one E2B endpoint in front of many aenv-server nodes

Usage: aenv-gateway [--listen HOST:PORT] --cluster redis://HOST:PORT
       aenv-gateway [--listen HOST:PORT] --cluster-sentinels HOST:PORT,... --cluster-master NAME

  --listen             address to serve on (default 0.0.0.0:8080)
  --cluster            the Redis the nodes register in (AENV_CLUSTER)
  --cluster-sentinels  instead: the Redis Sentinels that know its primary (AENV_CLUSTER_SENTINELS)
  --cluster-master     and the master name they monitor it under (AENV_CLUSTER_MASTER);
                       passwords from AENV_CLUSTER_PASSWORD, AENV_CLUSTER_SENTINEL_PASSWORD

Environment: AENV_API_KEY (the nodes' key; required), AENV_LOG_LEVEL; listener limits
AENV_HEADERS_TIMEOUT, AENV_REQUEST_TIMEOUT, AENV_KEEP_ALIVE_TIMEOUT, AENV_IDLE_TIMEOUT,
AENV_MAX_CONNECTIONS, AENV_TUNNEL_IDLE_TIMEOUT (seconds / a count, as on a node).
Stateless: run as many as you like behind one address.`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      listen: { type: "string" },
      ...CLUSTER_FLAGS,
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  const env = process.env;
  let target: RedisTarget | undefined;
  try {
    target = parseRedisTarget({
      url: values.cluster ?? (env.AENV_CLUSTER || undefined),
      sentinels: values["cluster-sentinels"] ?? (env.AENV_CLUSTER_SENTINELS || undefined),
      masterName: values["cluster-master"] ?? (env.AENV_CLUSTER_MASTER || undefined),
      ...redisPasswordsFromEnv(env),
    });
  } catch (err) {
    if (!(err instanceof RedisTargetError)) throw err;
    console.error(`aenv-gateway: ${err.message}`);
    process.exit(2);
  }
  const apiKey = env.AENV_API_KEY;
  if (!target || !apiKey) {
    console.error(
      "aenv-gateway: --cluster (AENV_CLUSTER) or --cluster-sentinels with --cluster-master, and AENV_API_KEY, are required",
    );
    process.exit(2);
  }
  const { host, port } = parseListen(values.listen ?? "0.0.0.0:8080");
  const log = pino({ level: process.env.AENV_LOG_LEVEL ?? "info" });
  installSafetyNet(log, "gateway");
  // Not waited for: until Redis answers, /health says 503 and calls that need it get 503.
  const redis = await openRedis(target, log, { wait: false, commandTimeoutMs: REDIS_COMMAND_TIMEOUT_MS });
  const app = buildGateway({
    redis,
    apiKey,
    log,
    limits: httpLimitsFromEnv(process.env),
    knownRoutes: knownRoutesFromEnv(process.env),
  });
  await app.listen({ host, port });
  log.info({ host, port, redis: describeRedisTarget(target) }, "aenv-gateway ready");
  stopOnSignals(async () => {
    await app.close();
    redis.disconnect();
  });
}

/** A gateway's Redis commands are single-key reads, writes and short scripts: 3 s is an outage. */
const REDIS_COMMAND_TIMEOUT_MS = 3_000;

/** AENV_GATEWAY_KNOWN_ROUTE_SECS: how long a route read from Redis serves traffic while Redis is out. */
function knownRoutesFromEnv(env: NodeJS.ProcessEnv): KnownRoutes {
  const raw = env.AENV_GATEWAY_KNOWN_ROUTE_SECS;
  if (raw === undefined || raw === "") return DEFAULT_KNOWN_ROUTES;
  const secs = Number(raw);
  if (!/^\d+(\.\d+)?$/.test(raw) || !Number.isFinite(secs)) {
    console.error(`aenv-gateway: AENV_GATEWAY_KNOWN_ROUTE_SECS must be a number of seconds, got "${raw}"`);
    process.exit(2);
  }
  return { ...DEFAULT_KNOWN_ROUTES, maxAgeMs: secs * 1000 };
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
