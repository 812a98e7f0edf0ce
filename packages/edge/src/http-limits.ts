/**
 * What one client may hold of an HTTP listener (the API with its proxy, the gateway): a slow
 * client (slowloris: a header byte every few seconds, a body that never ends) is cut off,
 * connections past a cap per client and a global one are refused or make room by closing idle
 * ones (connection-guard.ts), and silent connections and tunnels are closed. Streams
 * through the proxy are legitimate and long: only silence in both directions ends them.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { ConnectionGuard, type GuardHooks } from "./connection-guard.js";

export interface HttpLimits {
  /** The whole request head must arrive within this (slowloris). */
  headersTimeoutMs: number;
  /** A control-plane request (head and body) must arrive within this; 0: no limit. Proxied streams are exempt. */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: number;
  /** A connection with no bytes either way for this long is closed; 0: never. */
  idleTimeoutMs: number;
  /** Connections past this many close an idle one to make room, else are refused at accept; 0: no cap. */
  maxConnections: number;
  /** Unauthenticated connections one client address (an IPv6 /64) may hold; 0: no cap. */
  maxConnectionsPerClient: number;
  /** A WebSocket (or other upgraded) tunnel silent both ways for this long is closed; 0: never. */
  tunnelIdleTimeoutMs: number;
}

export const DEFAULT_HTTP_LIMITS: HttpLimits = {
  headersTimeoutMs: 20_000,
  requestTimeoutMs: 900_000,
  // Longer than the SDK's and envd's keepalive pings (every 50 s).
  keepAliveTimeoutMs: 75_000,
  idleTimeoutMs: 600_000,
  maxConnections: 4096,
  // A quarter of the whole: four greedy addresses fill it only with what eviction can close.
  maxConnectionsPerClient: 1024,
  tunnelIdleTimeoutMs: 600_000,
};

/**
 * An http.Server with the limits applied. Fastify must be told `connectionTimeout: 0` etc.
 * only through this (it leaves a serverFactory's server as made). `hooks.trusted` says which
 * requests prove their client (an API key), whose connections the per-client cap leaves alone.
 */
export function createLimitedServer(
  limits: HttpLimits,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  hooks: GuardHooks = {},
): Server {
  // Node checks header/request deadlines on this interval; the default (30 s) would let a
  // slow client live well past headersTimeout.
  const check = Math.max(250, Math.min(30_000, Math.floor(limits.headersTimeoutMs / 4)));
  // Node's own maxConnections is left unset: it refuses the newcomer even when idle
  // connections could make room, which is how one client locked everyone out.
  const guard = new ConnectionGuard(limits, hooks);
  const server = createServer({ connectionsCheckingInterval: check }, (req, res) => {
    guard.request(req, res);
    handler(req, res);
  });
  guard.attach(server);
  server.headersTimeout = limits.headersTimeoutMs;
  // Node's own requestTimeout would cut long uploads streamed to sandboxes: see requestDeadline.
  server.requestTimeout = 0;
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  // No listener for 'timeout' on the server: Node destroys the silent socket.
  server.setTimeout(limits.idleTimeoutMs);
  return server;
}

/** A control-plane request whose head and body have not all arrived within the limit is cut off. */
export function requestDeadline(limits: HttpLimits, req: IncomingMessage, res: ServerResponse): void {
  if (limits.requestTimeoutMs <= 0) return;
  const timer = setTimeout(() => {
    if (!req.complete) req.socket.destroy();
  }, limits.requestTimeoutMs);
  timer.unref();
  const clear = () => clearTimeout(timer);
  req.once("end", clear);
  res.once("close", clear);
}

/**
 * An upgraded connection (WebSocket tunnel) is closed once no byte has moved either way for
 * the limit: the socket's idle timer is reset by reads (client → sandbox) and writes
 * (sandbox → client) alike.
 */
export function tunnelIdle(limits: Pick<HttpLimits, "tunnelIdleTimeoutMs">, socket: Duplex, onIdle: () => void): void {
  const s = socket as Duplex & { setTimeout?: (ms: number, cb?: () => void) => void };
  if (limits.tunnelIdleTimeoutMs <= 0 || typeof s.setTimeout !== "function") return;
  s.setTimeout(limits.tunnelIdleTimeoutMs);
  socket.once("timeout", onIdle);
}
