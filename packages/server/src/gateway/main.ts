import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import pino from "pino";
import { httpLimitsFromEnv, parseListen } from "../config.js";
import { buildGateway } from "./app.js";

const HELP = `aenv-gateway — one E2B endpoint in front of many aenv-server nodes

Usage: aenv-gateway [--listen HOST:PORT] --cluster redis://HOST:PORT

  --listen   address to serve on (default 0.0.0.0:8080)
  --cluster  the Redis the nodes register in (AENV_CLUSTER)

Environment: AENV_API_KEY (the nodes' key; required), AENV_LOG_LEVEL; listener limits
AENV_HEADERS_TIMEOUT, AENV_REQUEST_TIMEOUT, AENV_KEEP_ALIVE_TIMEOUT, AENV_IDLE_TIMEOUT,
AENV_MAX_CONNECTIONS, AENV_TUNNEL_IDLE_TIMEOUT (seconds / a count, as on a node).
Stateless: run as many as you like behind one address.`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      listen: { type: "string" },
      cluster: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  const redisUrl = values.cluster ?? process.env.AENV_CLUSTER;
  const apiKey = process.env.AENV_API_KEY;
  if (!redisUrl || !apiKey) {
    console.error("aenv-gateway: --cluster (or AENV_CLUSTER) and AENV_API_KEY are required");
    process.exit(2);
  }
  const { host, port } = parseListen(values.listen ?? "0.0.0.0:8080");
  const log = pino({ level: process.env.AENV_LOG_LEVEL ?? "info" });
  process.on("unhandledRejection", (reason) => log.error({ err: reason }, "BUG: unhandled promise rejection"));
  process.on("uncaughtException", (err) => log.error({ err }, "BUG: uncaught exception"));
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 2 });
  redis.on("error", (err) => log.warn({ err: err.message }, "redis"));
  const app = buildGateway({ redis, apiKey, log, limits: httpLimitsFromEnv(process.env) });
  await app.listen({ host, port });
  log.info({ host, port, redis: redisUrl }, "aenv-gateway ready");
  const stop = async () => {
    await app.close();
    redis.disconnect();
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop());
  process.on("SIGINT", () => void stop());
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
