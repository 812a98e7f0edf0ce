/** The API/proxy listener's timeouts and connection caps, for a node and for the gateway. */

import { ConfigError, parseInt10 } from "./config-values.js";
import { DEFAULT_HTTP_LIMITS, type HttpLimits } from "./http-limits.js";

/** Listener limits from env names and file keys (the gateway reads the same variables). */
export function readHttpLimits(int: (envName: string, key: string, d: number) => number): HttpLimits {
  const d = DEFAULT_HTTP_LIMITS;
  const secs = (envName: string, key: string, ms: number) => int(envName, key, ms / 1000) * 1000;
  const limits: HttpLimits = {
    headersTimeoutMs: secs("AENV_HEADERS_TIMEOUT", "api.headers_timeout_secs", d.headersTimeoutMs),
    requestTimeoutMs: secs("AENV_REQUEST_TIMEOUT", "api.request_timeout_secs", d.requestTimeoutMs),
    keepAliveTimeoutMs: secs("AENV_KEEP_ALIVE_TIMEOUT", "api.keep_alive_timeout_secs", d.keepAliveTimeoutMs),
    idleTimeoutMs: secs("AENV_IDLE_TIMEOUT", "api.idle_timeout_secs", d.idleTimeoutMs),
    maxConnections: int("AENV_MAX_CONNECTIONS", "api.max_connections", d.maxConnections),
    maxConnectionsPerClient: int(
      "AENV_MAX_CONNECTIONS_PER_CLIENT",
      "api.max_connections_per_client",
      d.maxConnectionsPerClient,
    ),
    tunnelIdleTimeoutMs: secs("AENV_TUNNEL_IDLE_TIMEOUT", "proxy.tunnel_idle_timeout_secs", d.tunnelIdleTimeoutMs),
  };
  if (limits.headersTimeoutMs <= 0)
    throw new ConfigError("api.headers_timeout_secs (AENV_HEADERS_TIMEOUT) must be at least 1");
  if (limits.keepAliveTimeoutMs <= 0) {
    throw new ConfigError("api.keep_alive_timeout_secs (AENV_KEEP_ALIVE_TIMEOUT) must be at least 1");
  }
  return limits;
}

/** The gateway's listener limits: the same AENV_* variables as a node's (it has no config file). */
export function httpLimitsFromEnv(env: NodeJS.ProcessEnv): HttpLimits {
  return readHttpLimits((envName, _key, d) => {
    const v = env[envName];
    return v ? parseInt10(v, envName) : d;
  });
}
