// A node's Prometheus metrics: sandbox operations, warm images, the image and chunk caches,
// the repository, and the node's sandboxes and capacity, registered into the process's one
// registry (@aenv/edge/metrics, which also counts both planes' HTTP traffic).
//
// Counters the code bumps (operations, warm images, uploads) are module-level hooks; values
// that already live elsewhere (sandbox states, capacity, the chunk cache's own counters) are
// read when Prometheus scrapes.
import { registry } from "@aenv/edge/metrics";
import { Counter, Gauge, Histogram } from "prom-client";

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
