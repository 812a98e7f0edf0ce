import { mkdirSync, statfsSync } from "node:fs";
import { availableParallelism, totalmem } from "node:os";
import { ConfigError, parseListen } from "@aenv/edge/config-values";
import { readHttpLimits } from "@aenv/edge/http-config";
import type { HttpLimits } from "@aenv/edge/http-limits";
import { type ClusterConfig, type ClusterFlags, clusterConfig } from "./config/cluster.js";
import { type EgressConfig, egressConfig } from "./config/egress.js";
import { readConfigFile, type Value } from "./config/file.js";
import { settingsReader } from "./config/reader.js";
import { type RepositoryConfig, repositoryConfig } from "./config/repository.js";
import { resolveApiKey } from "./config/secrets.js";
import { NodePaths } from "./node-paths.js";

export { ConfigError, parseBytes, parseListen } from "@aenv/edge/config-values";
// The parts live in config/ (one job each); these names stay importable from here.
export type { ClusterConfig } from "./config/cluster.js";
export type { EgressConfig } from "./config/egress.js";
export { FILE_KEYS } from "./config/file.js";
export type { RepositoryConfig, S3Config } from "./config/repository.js";
export { E2B_KEY_FORM, resolveApiKey, resolveRepositoryKey } from "./config/secrets.js";

export interface ImagesConfig {
  /** Registries (host or host:port) spoken to over plain HTTP; loopback ones always are. */
  insecureRegistries: string[];
  /** Docker-style credentials file; unset: REGISTRY_AUTH_FILE, DOCKER_CONFIG, ~/.docker/config.json. */
  authFile?: string;
  /** Largest COPY context a template build accepts. */
  uploadLimitBytes: number;
  /**
   * API callers may name host paths as image sources (oci:, oci-archive:, docker-archive:).
   * Off by default: those read any file the server can. Operator commands always may.
   */
  allowHostSources: boolean;
  /**
   * API callers' image pulls may reach loopback, private and link-local registries (and follow
   * redirects and token realms there). Off by default: a pull is a request from the server.
   * Metadata addresses are never reached. Operator commands always may.
   */
  allowPrivateRegistries: boolean;
  /** A registry silent this long (no headers, no bytes) is given up on. */
  fetchTimeoutMs: number;
  /** Largest manifest/index/config accepted from a registry or archive. */
  maxManifestBytes: number;
  /** Largest image (config + compressed layers) a pull accepts. */
  maxImageBytes: number;
  /** Most bytes of decompressed tar, and most entries, one unpack of an image writes. */
  maxUnpackedBytes: number;
  maxUnpackedEntries: number;
  /** A build that has not finished after this no longer holds up the builds queued behind it. */
  buildTimeoutMs: number;
  /**
   * One byte limit for the templates folder (image content, template trees, warm images,
   * layer blobs); 0: none. Content of images started on demand is evicted least recently used
   * first, never what a sandbox of this node needs.
   */
  cacheMaxBytes: number;
  /**
   * Image references a create may name as its template (an E2B create, through any SDK): a
   * reference starting with one of these prefixes is pulled on demand. Empty: none; `*`: any.
   */
  onDemand: string[];
  /**
   * With cluster.p2p: an image another node holds starts from that node's tree index at once,
   * its files fetched when first opened (aenv-lazyfs), the rest in the background.
   */
  lazy: boolean;
}

export interface VolumesConfig {
  /** dir: plain folders; ext4: a loop-mounted ext4 image per volume (limit enforced inside sandboxes too). */
  backend: "dir" | "ext4";
  /** Most bytes of files one volume may hold (checked on content API uploads; ext4: the filesystem size). */
  maxSizeBytes: number;
}

/**
 * runtime.envd once chose between two envds; the Go one is the only one now. A config that
 * still names it is accepted, any other value (`node`) refused at start: such a host expects a
 * daemon it would not get.
 */
function checkEnvdSetting(v: string | undefined): void {
  if (v === undefined || v === "" || v === "native") return;
  throw new ConfigError(
    `runtime.envd (AENV_ENVD) = "${v}": the Node envd was removed; every sandbox runs the native (Go) envd. Remove the setting (or set it to "native")`,
  );
}

export interface ServerConfig {
  host: string;
  port: number;
  dataDir: string;
  templatesDir: string;
  apiKey: string;
  /** Returned as `domain`; sandbox ports are served at {port}-{id}.{domain}. */
  domain: string;
  slotCidr: string;
  netPrefix: string;
  platform: string;
  /**
   * The runtime driver: "gvisor" (runsc), or "sim", sandboxes simulated in the node's process
   * (runtime/sim/; scale tests of many nodes on one host), which needs a 127.X.0.0/16 slot range.
   */
  runtimeDriver: "gvisor" | "sim";
  /** The sim driver's operation times, as a multiple of those measured on runsc (0: immediate). */
  simLatencyScale: number;
  /**
   * The sim runtime's build, its checkpoint key (AENV_SIM_VERSION, default sim-1): nodes with
   * different ones stand for nodes on different runsc builds (a rolling upgrade).
   */
  simVersion: string;
  runscBinary: string;
  /** runsc's debug logs (a folder), for diagnosing the runtime; unset: none. */
  runscDebugLog?: string;
  logLevel: string;
  defaultTimeoutS: number;
  /** How often runsc is asked which sandboxes still run (OOM kills, crashes). */
  deadCheckIntervalS: number;
  /** Sandboxes booting or restoring at once; more wait their turn. */
  startConcurrency: number;
  /** Creates that start a sandbox (not served by the pool) at once; more queue or are refused. */
  createConcurrency: number;
  /** Longest a create may expect to queue for its start; past it, 503 with Retry-After at once. */
  createQueueMs: number;
  /** Pooled (pre-restored, frozen) sandboxes per recently used template: bounds of the adaptive size. */
  warmPoolMin: number;
  warmPoolMax: number;
  /** Idle seconds before a running sandbox is frozen in place (hibernation); 0 turns it off. */
  hibernateAfterS: number;
  /** CPU use (percent of one core) under which a sandbox counts as idle. */
  hibernateCpuPct: number;
  /** Idle seconds after which a frozen sandbox is saved to disk and stopped (its memory freed); 0: never. */
  hibernateSaveAfterS: number;
  /** A client's memory pause answers once its image is durable, not once the sandbox is stopped. */
  pauseWaitsForImage: boolean;
  /** A pause answered early writes its image this long after the answer (a resume or kill before needs none). */
  pauseImageDelayMs: number;
  /** Seconds between metrics samples kept for getMetrics ranges; 0 keeps none. */
  metricsIntervalS: number;
  /** Warm images of other runtime builds unused this long are removed at start. */
  staleWarmImageS: number;
  maxTimeoutS: number;
  bodyLimitBytes: number;
  /** Timeouts and the connection cap of the API/proxy listener (@aenv/edge/http-limits.ts). */
  http: HttpLimits;
  warmSlots: number;
  /** Most sandboxes (running or starting) this node runs at once; more get 429. */
  maxSandboxes: number;
  /** Sum of memoryMB that running and starting sandboxes may hold here; more get 429. */
  maxMemoryMB: number;
  /** Sum of cpuCount that running and starting sandboxes may hold here; more get 429. */
  maxCpus: number;
  /** Each sandbox's writable layer lives on a filesystem of its disk size (ENOSPC past it). */
  enforceDiskSize: boolean;
  /** Upper bound on any sandbox's disk size (its template's or its request's); 0: none. */
  maxDiskSizeMB: number;
  /** Bytes a sandbox's console (its init's stdout/stderr, a host file) may reach before it is emptied. */
  maxConsoleBytes: number;
  /** Paused sandboxes paused longer than this are deleted; 0 keeps them. */
  pausedMaxAgeS: number;
  /** Paused images on this node above this total: the oldest pauses are deleted; 0: no limit. */
  pausedMaxBytes: number;
  repository: RepositoryConfig;
  images: ImagesConfig;
  volumes: VolumesConfig;
  egress: EgressConfig;
  /**
   * Send a secret only to the hosts of its own allowedHosts; off (default), a secret without
   * them goes to the hosts of the rules that name it, as on E2B.
   */
  secretsRequireBinding: boolean;
  webhooks: WebhooksConfig;
  /** Set when this node is part of a cluster (Redis-backed routes, placement, drain). */
  cluster?: ClusterConfig;
  /** The config file read, if any. */
  configFile?: string;
}

export interface WebhooksConfig {
  /**
   * Webhook URLs may point at loopback, private and link-local addresses. Off by default: a
   * delivery is a request from the server. Metadata addresses are never reached.
   */
  allowPrivate: boolean;
  /** The first retry's wait; each next one doubles it, up to ten minutes. */
  retryFirstMs: number;
  /** A delivery not accepted within this long after its event is given up (failed). */
  windowS: number;
}

export interface CliArgs extends ClusterFlags {
  listen?: string;
  dataDir?: string;
  templatesDir?: string;
  domain?: string;
  /** --config FILE (TOML); AENV_CONFIG_PATH otherwise. */
  config?: string;
}

/**
 * Default disk ceiling: the size of the filesystem holding the data dir (every sandbox's
 * writable layer lives there, so no larger disk could ever be filled), in whole GiB; 64 GiB
 * when it cannot be read.
 */
export function dataFsSizeMB(dataDir: string): number {
  try {
    const st = statfsSync(dataDir);
    const mb = Math.floor((st.blocks * st.bsize) / 2 ** 20);
    return Math.max(1024, mb - (mb % 1024));
  } catch {
    return 64 * 1024;
  }
}

function volumesConfig(backend: string, maxSizeBytes: number): VolumesConfig {
  if (backend !== "dir" && backend !== "ext4") {
    throw new ConfigError(`volume backend must be dir or ext4, got "${backend}" (AENV_VOLUME_BACKEND)`);
  }
  if (backend === "ext4" && maxSizeBytes < 2 * 1024 ** 2) {
    throw new ConfigError("volume backend ext4 needs a volume size of at least 2MiB (AENV_VOLUME_MAX_SIZE)");
  }
  return { backend, maxSizeBytes };
}

/**
 * Settings come from, highest first: command-line flags, AENV_* environment variables, the
 * config file (--config FILE or AENV_CONFIG_PATH), built-in defaults.
 */
export function loadConfig(args: CliArgs, env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const configFile = args.config ?? env.AENV_CONFIG_PATH;
  const file = configFile ? readConfigFile(configFile) : new Map<string, Value>();
  const r = settingsReader(env, file);
  const { str, num, int, bool, factor, size } = r;

  const { host, port } = parseListen(args.listen ?? str("AENV_LISTEN", "listen") ?? "0.0.0.0:8000");
  const dataDir = args.dataDir ?? str("AENV_DATA_DIR", "data_dir") ?? "/var/lib/aenv";
  mkdirSync(dataDir, { recursive: true });

  const repository = repositoryConfig(r, dataDir, env);
  const cluster = clusterConfig(r, args, env, { host, port });
  // A paused sandbox must be in the shared repository promptly for any node to resume it.
  if (cluster) repository.pauseCommitDelayS = Math.min(repository.pauseCommitDelayS, 1);
  checkEnvdSetting(str("AENV_ENVD", "runtime.envd"));
  const runtimeDriver = str("AENV_RUNTIME_DRIVER", "runtime.driver") ?? "gvisor";
  if (runtimeDriver !== "gvisor" && runtimeDriver !== "sim") {
    throw new ConfigError(`runtime.driver (AENV_RUNTIME_DRIVER) must be gvisor or sim, got "${runtimeDriver}"`);
  }
  const slotCidr =
    str("AENV_SLOT_CIDR", "network.slot_cidr") ?? (runtimeDriver === "sim" ? "127.201.0.0/16" : "10.201.0.0/16");
  if (runtimeDriver === "sim" && !/^127\.\d+\.0\.0\/16$/.test(slotCidr)) {
    throw new ConfigError(
      `the sim runtime's envds listen on loopback: network.slot_cidr (AENV_SLOT_CIDR) must be 127.X.0.0/16, got "${slotCidr}"`,
    );
  }
  const scaleText = env.AENV_SIM_LATENCY_SCALE;
  const simLatencyScale = scaleText
    ? Number(scaleText)
    : ((file.get("runtime.sim_latency_scale") as number | undefined) ?? 1);
  if (!Number.isFinite(simLatencyScale) || simLatencyScale < 0) {
    throw new ConfigError(
      `runtime.sim_latency_scale (AENV_SIM_LATENCY_SCALE) must be a number >= 0, got "${scaleText}"`,
    );
  }

  return {
    host,
    port,
    dataDir,
    templatesDir:
      args.templatesDir ?? str("AENV_TEMPLATES_DIR", "templates_dir") ?? new NodePaths(dataDir).templatesDir,
    apiKey: resolveApiKey(dataDir, env),
    domain: args.domain ?? str("AENV_DOMAIN", "domain") ?? `localhost:${port}`,
    slotCidr,
    netPrefix: str("AENV_NET_PREFIX", "network.net_prefix") ?? "aenv",
    platform: str("AENV_RUNSC_PLATFORM", "runtime.platform") ?? "auto",
    runtimeDriver,
    simLatencyScale,
    simVersion: env.AENV_SIM_VERSION || "sim-1",
    runscBinary: str("AENV_RUNSC", "runtime.runsc") ?? "runsc",
    runscDebugLog: str("AENV_RUNSC_DEBUG_LOG", "runtime.debug_log"),
    logLevel: str("AENV_LOG_LEVEL", "log_level") ?? "info",
    defaultTimeoutS: num("AENV_DEFAULT_TIMEOUT", "sandbox.default_timeout_secs", 300),
    deadCheckIntervalS: num("AENV_DEAD_CHECK_INTERVAL", "sandbox.dead_check_interval_secs", 10),
    startConcurrency: num("AENV_START_CONCURRENCY", "sandbox.start_concurrency", 8 * availableParallelism()),
    createConcurrency: num("AENV_CREATE_CONCURRENCY", "sandbox.create_concurrency", availableParallelism()),
    createQueueMs: num("AENV_CREATE_QUEUE_MS", "sandbox.create_queue_ms", 1500),
    warmPoolMin: num("AENV_WARM_POOL_MIN", "sandbox.warm_pool_min", 1),
    warmPoolMax: num("AENV_WARM_POOL_MAX", "sandbox.warm_pool_max", 2),
    hibernateAfterS: num("AENV_HIBERNATE_AFTER", "sandbox.hibernate_after_secs", 60),
    // Above what an idle sandbox's sentry uses by itself: 3-7 % of a core here, up to 11 % in a
    // half-second window (runsc 20240729's systrap wakes every 400 us to tune its fast path).
    hibernateCpuPct: num("AENV_HIBERNATE_CPU_PERCENT", "sandbox.hibernate_cpu_percent", 15),
    hibernateSaveAfterS: num("AENV_HIBERNATE_SAVE_AFTER", "sandbox.hibernate_save_after_secs", 600),
    pauseWaitsForImage: bool("AENV_PAUSE_WAITS_FOR_IMAGE", "sandbox.pause_waits_for_image", false),
    pauseImageDelayMs: num("AENV_PAUSE_IMAGE_DELAY_MS", "sandbox.pause_image_delay_ms", 500),
    metricsIntervalS: num("AENV_METRICS_INTERVAL", "sandbox.metrics_interval_secs", 10),
    staleWarmImageS: num("AENV_STALE_WARM_IMAGE_SECS", "runtime.stale_warm_image_secs", 86400),
    maxTimeoutS: num("AENV_MAX_TIMEOUT", "sandbox.max_timeout_secs", 24 * 3600),
    bodyLimitBytes: num("AENV_BODY_LIMIT", "api.body_limit_bytes", 1024 * 1024),
    http: readHttpLimits(int),
    warmSlots: num("AENV_WARM_SLOTS", "network.warm_slots", 4),
    maxSandboxes: num("AENV_MAX_SANDBOXES", "sandbox.max_sandboxes", 256),
    // Limits are ceilings (cgroup), not reservations: the defaults overcommit the host. Memory
    // is what can take a host down, so it overcommits little; an idle sandbox uses almost no CPU.
    maxMemoryMB: int(
      "AENV_MAX_MEMORY_MB",
      "sandbox.max_memory_mb",
      Math.floor((totalmem() / 2 ** 20) * factor("AENV_MEMORY_OVERCOMMIT", "sandbox.memory_overcommit", 4)),
    ),
    maxCpus: int(
      "AENV_MAX_CPUS",
      "sandbox.max_cpus",
      Math.floor(availableParallelism() * factor("AENV_CPU_OVERCOMMIT", "sandbox.cpu_overcommit", 128)),
    ),
    enforceDiskSize: bool("AENV_ENFORCE_DISK_SIZE", "sandbox.enforce_disk_size", true),
    maxDiskSizeMB: int("AENV_MAX_DISK_SIZE_MB", "sandbox.max_disk_size_mb", dataFsSizeMB(dataDir)),
    maxConsoleBytes: int("AENV_MAX_CONSOLE_BYTES", "sandbox.max_console_bytes", 8 * 1024 * 1024),
    pausedMaxAgeS: int("AENV_PAUSED_MAX_AGE", "sandbox.paused_max_age_secs", 0),
    pausedMaxBytes: size("AENV_PAUSED_MAX_BYTES", "sandbox.paused_max_bytes", 0),
    repository,
    images: {
      insecureRegistries: (str("AENV_INSECURE_REGISTRIES", "images.insecure_registries") ?? "")
        .split(",")
        .map((h) => h.trim())
        .filter(Boolean),
      authFile: str("AENV_REGISTRY_AUTH_FILE", "images.auth_file") || undefined,
      uploadLimitBytes: size("AENV_UPLOAD_LIMIT", "images.upload_limit_bytes", 4 * 1024 ** 3),
      allowHostSources: bool("AENV_ALLOW_HOST_IMAGE_SOURCES", "images.allow_host_sources", false),
      allowPrivateRegistries: bool("AENV_ALLOW_PRIVATE_REGISTRIES", "images.allow_private_registries", false),
      fetchTimeoutMs: Math.max(1, int("AENV_REGISTRY_TIMEOUT", "images.fetch_timeout_secs", 60)) * 1000,
      maxManifestBytes: size("AENV_REGISTRY_MAX_MANIFEST", "images.max_manifest_bytes", 4 * 1024 ** 2),
      maxImageBytes: size("AENV_REGISTRY_MAX_IMAGE", "images.max_image_bytes", 32 * 1024 ** 3),
      maxUnpackedBytes: size("AENV_MAX_UNPACKED", "images.max_unpacked_bytes", 64 * 1024 ** 3),
      maxUnpackedEntries: Math.max(1, int("AENV_MAX_UNPACKED_ENTRIES", "images.max_unpacked_entries", 4_000_000)),
      buildTimeoutMs: Math.max(1, int("AENV_BUILD_TIMEOUT", "images.build_timeout_secs", 3600)) * 1000,
      cacheMaxBytes: size("AENV_IMAGE_CACHE_MAX_BYTES", "images.cache_max_bytes", 0),
      onDemand: (str("AENV_IMAGE_ON_DEMAND", "images.on_demand") ?? "")
        .split(",")
        .map((p) => p.trim())
        .filter(Boolean),
      lazy: bool("AENV_IMAGE_LAZY", "images.lazy", true),
    },
    volumes: volumesConfig(
      str("AENV_VOLUME_BACKEND", "volumes.backend") ?? "dir",
      size("AENV_VOLUME_MAX_SIZE", "volumes.max_size_bytes", 10 * 1024 ** 3),
    ),
    egress: egressConfig(
      str("AENV_DENIED_RANGES", "network.denied_ranges") ?? (env.AENV_DENIED_RANGES === "" ? "" : undefined),
      str("AENV_EGRESS_HOSTS", "network.egress_hosts"),
      str("AENV_EGRESS_UPSTREAM_CA_FILE", "network.egress_upstream_ca_file"),
      str("AENV_EGRESS_CA_DIR", "network.egress_ca_dir"),
      str("AENV_EGRESS_PROXY_ALLOWED", "network.egress_proxy_allowed"),
    ),
    secretsRequireBinding: bool("AENV_SECRETS_REQUIRE_BINDING", "network.secrets_require_binding", false),
    webhooks: {
      allowPrivate: bool("AENV_ALLOW_PRIVATE_WEBHOOKS", "webhooks.allow_private", false),
      retryFirstMs: Math.max(10, int("AENV_WEBHOOK_RETRY_MS", "webhooks.retry_first_ms", 1000)),
      windowS: Math.max(1, int("AENV_WEBHOOK_WINDOW", "webhooks.window_secs", 86_400)),
    },
    ...(cluster ? { cluster } : {}),
    configFile,
  };
}
