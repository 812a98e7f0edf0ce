/**
 * envd's plain-HTTP side (beside its Connect services), as the server calls it over a
 * sandbox's slot address: the bodies are defined once here for both ends.
 */

/** POST /init: (re)initialises envd after a boot or a restore. The old token authorises it. */
export interface EnvdInitBody {
  envVars?: Record<string, string>;
  /** The new envd access token; absent or empty keeps the current one. */
  accessToken?: string;
  defaultUser?: string;
  defaultWorkdir?: string;
  /** The host's time; envd never sets the clock. */
  timestamp?: string;
}

/** GET /metrics: one sample from inside the sandbox. */
export interface EnvdMetrics {
  ts: number;
  cpu_count: number;
  /** The sandbox's processes' CPU since envd's previous sample, percent of all its CPUs. */
  cpu_used_pct: number;
  /**
   * aenv's: CPU time the sandbox's processes have used in all, ms (envd's own left out). What
   * the workload computes, without the runtime's housekeeping that the host's cgroup counts too.
   */
  cpu_time_ms?: number;
  mem_total: number;
  mem_used: number;
  mem_cache: number;
  mem_total_mib: number;
  mem_used_mib: number;
  disk_used: number;
  disk_total: number;
}

/**
 * GET (no body): 204 when the request's `X-Access-Token` is the token envd holds (or envd holds
 * none), else 401 with envd's error body. Services of ours inside a sandbox (the code
 * interpreter) authenticate their callers with it, so they check exactly what envd checks and
 * follow every change of the token (a warm start, a fork child, a snapshot start) at once.
 */
export const ENVD_ACCESS_CHECK_PATH = "/access/check";

/**
 * POST /quiesce (no body, 204): envd closes every connection it holds open, before a
 * checkpoint (a restored socket to a peer that is gone would spin).
 */
export const ENVD_QUIESCE_PATH = "/quiesce";

/**
 * POST /heap/reduce (no body, 204): envd gives back the memory its runtime holds beyond its
 * live objects (V8's committed but unused pages, freed malloc heap). The host asks before it
 * freezes an idle sandbox, so a frozen sandbox holds less; /quiesce?gc=1 does the same before
 * an image that many sandboxes start from or that an idle sandbox is saved to.
 */
export const ENVD_HEAP_REDUCE_PATH = "/heap/reduce";

/**
 * POST (no body): envd stops every other process in the sandbox, then answers 200 with the
 * sandbox's writable filesystem layer as a tar stream (what differs from the template tree
 * bound read-only at SANDBOX_LOWER_DIR; deletions as `.wh.` whiteouts). The processes go on
 * once the stream ends (the host stops the sandbox right after a filesystem-only pause).
 */
export const ENVD_FS_LAYER_CAPTURE_PATH = "/fs-layer/capture";
/** POST, body a layer from ENVD_FS_LAYER_CAPTURE_PATH: envd applies it to / (200, EnvdLayerStats). */
export const ENVD_FS_LAYER_APPLY_PATH = "/fs-layer/apply";
/** Where every sandbox sees its template's tree, read-only: the base a layer is taken against. */
export const SANDBOX_LOWER_DIR = "/.aenv/lower";

/** What a layer capture or apply covered. */
export interface EnvdLayerStats {
  entries: number;
  whiteouts: number;
  bytes: number;
}
