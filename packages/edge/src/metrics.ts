// Prometheus metrics (prom-client) for operators: GET /metrics on every node and gateway, in the
// text exposition format. Unauthenticated, like GET /health: labels are bounded (operations,
// states, protocols, status classes) and never carry sandbox IDs, template names or keys.
// Every metric is listed in docs/deployment.md#metrics.
//
// This module holds the one registry a process scrapes and what both planes count (HTTP
// requests, sandbox traffic, shed connections); a node's own metrics register into it from
// @aenv/server (telemetry/prometheus.ts), a gateway's from @aenv/gateway (metrics.ts).
import type { ServerResponse } from "node:http";
import { Counter, collectDefaultMetrics, Registry } from "prom-client";

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

export const CONTENT_TYPE = registry.contentType;

/** The text Prometheus scrapes. */
export function scrape(): Promise<string> {
  return registry.metrics();
}

const proxyRequests = new Counter({
  name: "aenv_proxy_requests_total",
  help: "Requests for a sandbox port or envd (E2B headers, port-id host, /proxy path) through this process",
  labelNames: ["protocol"] as const,
  registers: [registry],
});
const proxyErrors = new Counter({
  name: "aenv_proxy_errors_total",
  help: "Sandbox traffic answered with a 5xx by this process (sandbox or node unreachable, proxy error)",
  labelNames: ["protocol"] as const,
  registers: [registry],
});
const apiRequests = new Counter({
  name: "aenv_api_requests_total",
  help: "Control-plane API requests, by status class",
  labelNames: ["status_class"] as const,
  registers: [registry],
});
for (const p of ["http", "websocket"]) {
  proxyRequests.inc({ protocol: p }, 0);
  proxyErrors.inc({ protocol: p }, 0);
}
for (const c of ["2xx", "3xx", "4xx", "5xx"]) apiRequests.inc({ status_class: c }, 0);

/** One HTTP request arriving (proxy: sandbox traffic; api: the control plane), counted when answered. */
export function countRequest(res: ServerResponse, plane: "proxy" | "api"): void {
  if (plane === "proxy") proxyRequests.inc({ protocol: "http" });
  res.once("finish", () => {
    const status = res.statusCode;
    if (plane === "proxy") {
      if (status >= 500) proxyErrors.inc({ protocol: "http" });
    } else {
      apiRequests.inc({ status_class: `${Math.min(5, Math.max(2, Math.floor(status / 100)))}xx` });
    }
  });
}

/** A WebSocket (upgrade) request for a sandbox port or envd. */
export function countUpgrade(): void {
  proxyRequests.inc({ protocol: "websocket" });
}

const connectionsShed = new Counter({
  name: "aenv_connections_shed_total",
  help: "Connections refused at accept (per_client: the address holds its share; full: nothing idle to close) or idle ones closed to make room (evicted_idle)",
  labelNames: ["reason"] as const,
  registers: [registry],
});

export function countConnectionShed(reason: "per_client" | "full" | "evicted_idle"): void {
  connectionsShed.inc({ reason });
}

/** An error answered on a raw socket (upgrades); 5xx ones are proxy errors. */
export function countSocketError(status: number): void {
  if (status >= 500) proxyErrors.inc({ protocol: "websocket" });
}
