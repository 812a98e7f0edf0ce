import { Counter, Gauge } from "prom-client";
import { registry } from "./metrics.js";

/**
 * API keys' use on /metrics: sandboxes each key runs now (a node: its own; a gateway: the
 * cluster's, from the nodes' heartbeats), and the calls its limits refused. Labelled by key
 * ID (names change; IDs do not), the operator's not counted.
 */
const refusals = new Counter({
  name: "aenv_api_key_refusals_total",
  help: "Calls refused by an API key's limits: sandboxes (its concurrent cap) or rate (creates a second, calls a window)",
  labelNames: ["key", "limit"] as const,
  registers: [registry],
});

export function countKeyRefusal(key: string, limit: "sandboxes" | "rate"): void {
  refusals.inc({ key, limit });
}

let running: () => Promise<Map<string, number>> | Map<string, number> = () => new Map();
let registered = false;

/** Where the running sandboxes per key are read at each scrape (a second call replaces it). */
export function registerKeySandboxes(read: () => Promise<Map<string, number>> | Map<string, number>): void {
  running = read;
  if (registered) return;
  registered = true;
  new Gauge({
    name: "aenv_api_key_sandboxes",
    help: "Sandboxes an API key runs now (running or hibernated, not paused), what its maxSandboxes caps",
    labelNames: ["key"] as const,
    registers: [registry],
    async collect() {
      this.reset();
      for (const [key, n] of await running()) this.set({ key }, n);
    },
  });
}
