// Prometheus metrics (prom-client) for operators: GET /metrics on every node and gateway, in the
// text exposition format. Unauthenticated, like GET /health: labels are bounded (operations,
// states, protocols, status classes) and never carry sandbox IDs, template names or keys.
// Every metric is listed in docs/deployment.md#metrics.
//
// Counters the code bumps (operations, proxy traffic, warm images, uploads) are module-level
// hooks; values that already live elsewhere (sandbox states, capacity, the chunk cache's own
// counters, the cluster's nodes) are read when Prometheus scrapes.
import type { ServerResponse } from "node:http";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

export const CONTENT_TYPE = registry.contentType;

/** The text Prometheus scrapes. */
export function scrape(): Promise<string> {
  return registry.metrics();
}

// ---------------------------------------------------------------- both: HTTP planes

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

// ---------------------------------------------------------------- node: sandbox operations

export const OPERATIONS = ["create", "pause", "resume", "snapshot", "fork"] as const;
export type Operation = (typeof OPERATIONS)[number];

const opSeconds = new Histogram({
  name: "aenv_sandbox_operation_duration_seconds",
  help: "Duration of successful sandbox operations on this node (create, pause, resume, snapshot, fork)",
  labelNames: ["operation"] as const,
  buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
  registers: [],
});
const opFailures = new Counter({
  name: "aenv_sandbox_operation_failures_total",
  help: "Sandbox operations on this node that failed (any error, including refusals such as capacity)",
  labelNames: ["operation"] as const,
  registers: [],
});
const warmImages = new Counter({
  name: "aenv_warm_image_requests_total",
  help: "Creates eligible for a template's warm image: hit (restored from it) or miss (cold boot)",
  labelNames: ["result"] as const,
  registers: [],
});
const sweeps = new Counter({
  name: "aenv_sweeps_total",
  help: "Background sweeps finished: hibernation (idle sandboxes frozen or saved), retention (paused sandboxes over the limits deleted)",
  labelNames: ["kind"] as const,
  registers: [],
});
const pauseCommits = new Counter({
  name: "aenv_pause_commits_total",
  help: "Pause images committed to the snapshot repository (committed), or a try that failed (failed; it is tried again while the sandbox stays paused)",
  labelNames: ["result"] as const,
  registers: [],
});
const repoUploaded = { bytes: 0 };

/**
 * Times one operation: a success is observed in the histogram, a failure counted. `counts`
 * says whether a success is the operation at all (a connect to a running sandbox is no resume).
 */
export async function timed<T>(
  op: Operation,
  fn: () => Promise<T>,
  counts: (r: T) => boolean = () => true,
): Promise<T> {
  const start = process.hrtime.bigint();
  try {
    const r = await fn();
    if (counts(r)) opSeconds.observe({ operation: op }, Number(process.hrtime.bigint() - start) / 1e9);
    return r;
  } catch (err) {
    opFailures.inc({ operation: op });
    throw err;
  }
}

/** A create that could use a warm image found one (hit) or booted (miss). */
/** A background sweep finished: what waits on one (a test that something did not happen) can see it. */
export function countSweep(kind: "hibernation" | "retention"): void {
  sweeps.inc({ kind });
}

export function countPauseCommit(committed: boolean): void {
  pauseCommits.inc({ result: committed ? "committed" : "failed" });
}

export function countWarmImage(hit: boolean): void {
  warmImages.inc({ result: hit ? "hit" : "miss" });
}

const imageRequests = new Counter({
  name: "aenv_image_cache_requests_total",
  help: "Creates naming an image on demand: hit (its template was on the node) or miss (pulled)",
  labelNames: ["result"] as const,
  registers: [],
});
const imageFetched = new Counter({
  name: "aenv_image_cache_fetched_bytes_total",
  help: "Layer bytes fetched from registries for images started on demand",
  registers: [],
});
const imageEvictions = new Counter({
  name: "aenv_image_cache_evictions_total",
  help: "What the image cache dropped to make room: layer blobs and on-demand templates",
  labelNames: ["kind"] as const,
  registers: [],
});
let imageCacheBytes: () => { used: number; max: number } = () => ({ used: 0, max: 0 });

export function countImageRequest(hit: boolean, fetchedBytes = 0): void {
  imageRequests.inc({ result: hit ? "hit" : "miss" });
  if (fetchedBytes > 0) imageFetched.inc(fetchedBytes);
}

export function countImageEviction(kind: "blob" | "template"): void {
  imageEvictions.inc({ kind });
}

/** Where the image cache's usage and limit are read at each scrape. */
export function registerImageCache(read: () => { used: number; max: number }): void {
  imageCacheBytes = read;
}

/** Compressed chunk bytes written to the snapshot repository. */
export function countRepositoryUpload(bytes: number): void {
  repoUploaded.bytes += bytes;
}

/** The chunk cache's totals a scrape reports. */
export interface ChunkCacheFigures {
  hits: number;
  misses: number;
  bytesFetched: number;
  cacheUsedBytes: number;
  cacheMaxBytes: number;
  peerChunks: number;
  peerBytes: number;
  peerRefused: number;
}

const NO_CACHE: ChunkCacheFigures = {
  hits: 0,
  misses: 0,
  bytesFetched: 0,
  cacheUsedBytes: 0,
  cacheMaxBytes: 0,
  peerChunks: 0,
  peerBytes: 0,
  peerRefused: 0,
};

/** What a node reports when scraped. */
export interface NodeSource {
  sandboxes(): Array<{ state: string; cpuCount: number; memoryMB: number }>;
  capacity: number;
  ready(): boolean;
  draining(): boolean;
  cache(): ChunkCacheFigures;
}

const SANDBOX_STATES = ["creating", "running", "paused"];

let nodeSource: NodeSource | undefined;

/** Registers the node's metrics, read from `source` at each scrape (a second call replaces the source). */
export function registerNode(source: NodeSource): void {
  const first = nodeSource === undefined;
  nodeSource = source;
  if (!first) return;
  const src: NodeSource = {
    sandboxes: () => nodeSource?.sandboxes() ?? [],
    get capacity() {
      return nodeSource?.capacity ?? 0;
    },
    ready: () => nodeSource?.ready() ?? false,
    draining: () => nodeSource?.draining() ?? false,
    cache: () => nodeSource?.cache() ?? NO_CACHE,
  };
  registry.registerMetric(opSeconds);
  registry.registerMetric(opFailures);
  registry.registerMetric(warmImages);
  registry.registerMetric(sweeps);
  registry.registerMetric(pauseCommits);
  registry.registerMetric(imageRequests);
  registry.registerMetric(imageFetched);
  registry.registerMetric(imageEvictions);
  for (const r of ["hit", "miss"]) imageRequests.inc({ result: r }, 0);
  for (const k of ["blob", "template"]) imageEvictions.inc({ kind: k }, 0);
  new Gauge({
    name: "aenv_image_cache_bytes",
    help: "The templates folder's bytes (used) and its limit (max; 0: none), images.cache_max_bytes",
    labelNames: ["kind"] as const,
    registers: [registry],
    collect() {
      const b = imageCacheBytes();
      this.set({ kind: "used" }, b.used);
      this.set({ kind: "max" }, b.max);
    },
  });
  for (const op of OPERATIONS) opFailures.inc({ operation: op }, 0);
  for (const r of ["hit", "miss"]) warmImages.inc({ result: r }, 0);
  for (const k of ["hibernation", "retention"]) sweeps.inc({ kind: k }, 0);
  for (const r of ["committed", "failed"]) pauseCommits.inc({ result: r }, 0);
  new Gauge({
    name: "aenv_sandboxes",
    help: "Sandboxes on this node by state",
    labelNames: ["state"] as const,
    registers: [registry],
    collect() {
      const n = new Map(SANDBOX_STATES.map((s) => [s, 0]));
      for (const s of src.sandboxes()) n.set(s.state, (n.get(s.state) ?? 0) + 1);
      for (const [state, v] of n) this.set({ state }, v);
    },
  });
  new Gauge({
    name: "aenv_node_capacity_sandboxes",
    help: "Sandboxes this node runs at most at once (max_sandboxes)",
    registers: [registry],
    collect() {
      this.set(src.capacity);
    },
  });
  new Gauge({
    name: "aenv_node_allocated_cpus",
    help: "vCPUs allocated to running and starting sandboxes",
    registers: [registry],
    collect() {
      this.set(src.sandboxes().reduce((a, s) => a + (s.state === "paused" ? 0 : s.cpuCount), 0));
    },
  });
  new Gauge({
    name: "aenv_node_allocated_memory_bytes",
    help: "Memory allocated to running and starting sandboxes",
    registers: [registry],
    collect() {
      this.set(src.sandboxes().reduce((a, s) => a + (s.state === "paused" ? 0 : s.memoryMB * 1024 * 1024), 0));
    },
  });
  new Gauge({
    name: "aenv_node_ready",
    help: "1 when the node serves (GET /health answers 204), else 0",
    registers: [registry],
    collect() {
      this.set(src.ready() ? 1 : 0);
    },
  });
  new Gauge({
    name: "aenv_node_draining",
    help: "1 while a cluster node drains (SIGTERM), else 0",
    registers: [registry],
    collect() {
      this.set(src.draining() ? 1 : 0);
    },
  });
  // The chunk cache keeps its own totals; each scrape reports them as they are.
  new Counter({
    name: "aenv_chunk_cache_requests_total",
    help: "Snapshot chunks a restore needed: hit (in the node cache), peer (sent by another node, cluster.p2p) or miss (fetched from the repository)",
    labelNames: ["result"] as const,
    registers: [registry],
    collect() {
      const c = src.cache();
      this.reset();
      this.inc({ result: "hit" }, c.hits);
      this.inc({ result: "peer" }, c.peerChunks);
      this.inc({ result: "miss" }, c.misses);
    },
  });
  new Counter({
    name: "aenv_chunk_peer_refused_total",
    help: "Snapshot chunks another node sent wrong (size or digest), each then asked of the next holder or the repository",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(src.cache().peerRefused);
    },
  });
  new Counter({
    name: "aenv_repository_bytes_total",
    help: "Compressed bytes moved to (out: commits) and from (in: restores) the snapshot repository",
    labelNames: ["direction"] as const,
    registers: [registry],
    collect() {
      this.reset();
      this.inc({ direction: "in" }, src.cache().bytesFetched);
      this.inc({ direction: "out" }, repoUploaded.bytes);
    },
  });
  new Gauge({
    name: "aenv_chunk_cache_bytes",
    help: "Bytes in the node's chunk cache (used) and its bound (max)",
    labelNames: ["kind"] as const,
    registers: [registry],
    collect() {
      const c = src.cache();
      this.set({ kind: "used" }, c.cacheUsedBytes);
      this.set({ kind: "max" }, c.cacheMaxBytes);
    },
  });
}

// ---------------------------------------------------------------- gateway: the cluster

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
