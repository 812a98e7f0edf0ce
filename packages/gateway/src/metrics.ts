// The gateway's view of the cluster on /metrics, registered into the process's one registry
// (@aenv/edge/metrics, which also counts the HTTP traffic it serves).
import { registry } from "@aenv/edge/metrics";
import { Gauge } from "prom-client";

type ClusterNodes = () => Promise<
  Array<{ status: string; sandboxCount: number; pausedCount: number; capacity: number }>
>;
let gatewaySource: ClusterNodes | undefined;

/** Registers the gateway's view of the cluster, read from Redis at each scrape (a second call replaces it). */
export function registerGateway(source: ClusterNodes): void {
  const first = gatewaySource === undefined;
  gatewaySource = source;
  if (!first) return;
  const nodes: ClusterNodes = () => (gatewaySource ? gatewaySource() : Promise.resolve([]));
  // One Redis read per scrape, shared by the three gauges (collected concurrently).
  let last: Awaited<ReturnType<ClusterNodes>> = [];
  let pending: Promise<void> | undefined;
  let at = 0;
  const refresh = (): Promise<void> => {
    if (!pending || Date.now() - at > 1000) {
      at = Date.now();
      pending = nodes().then(
        (n) => {
          last = n;
        },
        () => {},
      );
    }
    return pending;
  };
  new Gauge({
    name: "aenv_gateway_nodes",
    help: "Cluster nodes with a live heartbeat, by status (ready, draining)",
    labelNames: ["status"] as const,
    registers: [registry],
    async collect() {
      await refresh();
      this.set({ status: "ready" }, last.filter((n) => n.status === "ready").length);
      this.set({ status: "draining" }, last.filter((n) => n.status === "draining").length);
    },
  });
  new Gauge({
    name: "aenv_gateway_cluster_sandboxes",
    help: "Sandboxes the cluster's nodes report, by state (running includes starting)",
    labelNames: ["state"] as const,
    registers: [registry],
    async collect() {
      await refresh();
      this.set(
        { state: "running" },
        last.reduce((a, n) => a + n.sandboxCount, 0),
      );
      this.set(
        { state: "paused" },
        last.reduce((a, n) => a + n.pausedCount, 0),
      );
    },
  });
  new Gauge({
    name: "aenv_gateway_cluster_capacity_sandboxes",
    help: "Sandboxes the ready nodes run at most at once, together",
    registers: [registry],
    async collect() {
      await refresh();
      this.set(last.filter((n) => n.status === "ready").reduce((a, n) => a + n.capacity, 0));
    },
  });
}
