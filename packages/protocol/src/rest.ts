/**
 * The control-plane REST contract: what aenv-server answers (E2B's shapes plus our
 * extensions). The server's serialisers return these types and the CLI reads them, so the two
 * cannot drift. Request bodies are the zod schemas in rest-schemas.ts.
 */

import type { ApiKeyLimits, BuildState } from "./rest-schemas.js";

/** Every error answer, from the API and the proxy alike. */
export interface ErrorBody {
  code: number;
  message: string;
  /** E2B's machine-readable reason, where one applies (see ERROR_CODES). */
  error_code?: ErrorCode;
}

/**
 * E2B's `error_code` values that aenv answers. A client's retry loop keys on them: the
 * capacity ones come with a 503 and `Retry-After`, and nothing was started.
 */
export const ERROR_CODES = {
  /** No node (or this node) has room now: limits, budgets or the start queue. */
  capacityUnavailable: "sandbox_capacity_unavailable",
  /** The sandbox was placed but could not be started. */
  createFailed: "sandbox_create_failed",
  /** The API key's concurrent sandboxes are at its cap (429 with Retry-After). */
  keySandboxLimit: "api_key_sandbox_limit",
  /** The API key's creates a second or calls a window are at its cap (429 with Retry-After). */
  keyRateLimit: "api_key_rate_limit",
} as const;
export type ErrorCode = (typeof ERROR_CODES)[keyof typeof ERROR_CODES];

/** `Sandbox`: what create, connect and resume return. */
export interface SandboxCreated {
  sandboxID: string;
  templateID: string;
  clientID: string;
  alias: string;
  envdVersion: string;
  envdAccessToken: string;
  trafficAccessToken: string | null;
  domain: string;
}

export type SandboxState = "running" | "paused";

/** E2B's `IdentifierMaskingDetails`: how a key is shown without its value. */
export interface KeyMask {
  prefix: string;
  valueLength: number;
  maskedValuePrefix: string;
  maskedValueSuffix: string;
}

/** E2B's `TeamAPIKey` (GET /api-keys), with aenv's `limits` and whether it is the operator's. */
export interface ApiKeyInfo {
  id: string;
  name: string;
  mask: KeyMask;
  createdAt: string;
  createdBy: null;
  lastUsed: string | null;
  limits?: ApiKeyLimits;
  admin?: boolean;
}

/** E2B's `CreatedTeamAPIKey` (POST /api-keys): the key itself, shown this once. */
export interface CreatedApiKey extends ApiKeyInfo {
  key: string;
}

/** `ListedSandbox`: an entry of GET /v2/sandboxes. */
export interface ListedSandbox {
  sandboxID: string;
  templateID: string;
  alias: string;
  clientID: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  startedAt: string;
  endAt: string;
  state: SandboxState;
  envdVersion: string;
  metadata: Record<string, string>;
  volumeMounts: Array<{ name: string; path: string }>;
  /** aenv: the node it lives on (its cluster node ID, else the server's host name). */
  nodeID?: string;
  /**
   * aenv: a running sandbox that is hibernated, frozen in memory or saved to disk (any use
   * brings it back, so E2B's `state` stays "running"); absent when it is awake.
   */
  hibernation?: "frozen" | "saved";
}

/** `SandboxDetail`: GET /sandboxes/{id}. */
export interface SandboxDetail extends ListedSandbox {
  envdAccessToken: string;
  domain: string;
  allowInternetAccess: boolean;
  lifecycle: { onTimeout: "pause" | "kill"; autoResume: boolean };
  /** The settings in force (E2B `SandboxNetworkConfig`), when any were given. */
  network?: {
    allowOut?: string[];
    denyOut?: string[];
    rules?: Record<string, Array<{ transform?: { headers?: Record<string, string> } }>>;
    allowPublicTraffic?: boolean;
    maskRequestHost?: string;
  };
}

/** One child of POST /sandboxes/{id}/fork: started, or why not (siblings are unaffected). */
export type ForkResult = { sandbox: SandboxCreated } | { error: ErrorBody };

/** A snapshot: E2B's {snapshotID, names} plus sizing, dates and the repository commit. */
export interface SnapshotInfo {
  snapshotID: string;
  names: string[];
  sandboxID: string;
  templateID: string;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  sizeBytes: number;
  /** In the shared repository: other servers can start it. */
  committed: boolean;
  uploadedBytes?: number;
  createdAt: string;
  updatedAt: string;
}

/** E2B `LogLevel`. */
export type SandboxLogLevel = "debug" | "info" | "warn" | "error";

/** E2B `SandboxLogEntry`: one line of a sandbox's logs. */
export interface SandboxLogEntry {
  timestamp: string;
  level: SandboxLogLevel;
  message: string;
  fields: Record<string, string>;
}

/** GET /sandboxes/{id}/logs (E2B `SandboxLogs`, deprecated there in favour of v2). */
export interface SandboxLogsV1 {
  logs: Array<{ timestamp: string; line: string }>;
  logEntries: SandboxLogEntry[];
}

/** GET /v2/sandboxes/{id}/logs (E2B `SandboxLogsV2Response`). */
export interface SandboxLogsV2 {
  logs: SandboxLogEntry[];
}

/** One sample of GET /sandboxes/{id}/metrics. */
export interface SandboxMetric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

/** GET /sandboxes/metrics (E2B `SandboxesWithMetrics`): the latest sample of each running sandbox asked for. */
export interface SandboxesWithMetrics {
  sandboxes: Record<string, SandboxMetric>;
}

export type { BuildState };

/** A template as GET /templates and GET /templates/{id} show it (fields the CLI reads). */
export interface TemplateInfo {
  templateID: string;
  buildID?: string;
  names?: string[];
  aliases?: string[];
  buildStatus?: BuildState;
  fromImage?: string;
  fromTemplate?: string;
  createdAt?: string;
  updatedAt?: string;
  cpuCount?: number;
  memoryMB?: number;
  builds?: Array<{ buildID: string; status: string }>;
}

export interface BuildLogEntry {
  timestamp: string;
  level: string;
  message: string;
  step?: string;
}

/** GET /templates/{id}/builds/{buildID}/status. */
export interface BuildStatus {
  templateID: string;
  buildID: string;
  status: BuildState;
  logEntries: BuildLogEntry[];
  /** The same entries as `[timestamp] message` lines (E2B's older field). */
  logs: string[];
  /** Why a build failed, with its last error entries. */
  reason?: { message: string; step?: string; logEntries?: BuildLogEntry[] };
}

/** GET /templates/{id}/builds/{buildID}/logs (E2B `TemplateBuildLogsResponse`). */
export interface BuildLogs {
  logs: BuildLogEntry[];
}

/** PATCH /v2/templates/{id} (E2B `TemplateUpdateResponse`); the v1 route answers no body. */
export interface TemplateUpdated {
  names: string[];
}

/** `Volume`: an entry of GET /volumes (no token). */
export interface VolumeListed {
  volumeID: string;
  name: string;
}

/** `VolumeAndToken`: POST /volumes and GET /volumes/{id}; the token authorises /volumecontent. */
export interface VolumeAndToken extends VolumeListed {
  token: string;
}

/** `VolumeEntryStat`: a file or folder of a volume, as the content API returns it. */
export interface VolumeEntryStat {
  name: string;
  /** Absolute inside the volume ("/dir/file"). */
  path: string;
  type: "unknown" | "file" | "directory" | "symlink";
  size: number;
  mode: number;
  uid: number;
  gid: number;
  atime: string;
  mtime: string;
  ctime: string;
  target?: string;
}

/** `Secret`: metadata only; the value is never returned. */
export interface SecretInfo {
  secretID: string;
  name: string;
  currentVersion: number;
  metadata: Record<string, string>;
  /** The hosts the secret may be sent to (aenv's addition); empty: it is sent nowhere. */
  allowedHosts: string[];
  createdAt: string;
  updatedAt: string;
}

/**
 * GET /teams (E2B `Team`): the one team a cluster has while it has one API key; its key is
 * the caller's own.
 */
export interface Team {
  teamID: string;
  name: string;
  apiKey: string;
  isDefault: boolean;
}

/** The team of a cluster with one API key. */
export const DEFAULT_TEAM_ID = "default";

/** GET /teams/{teamID}/metrics (E2B `TeamMetric`): one sample of the team's sandboxes. */
export interface TeamMetric {
  timestamp: string;
  timestampUnix: number;
  /** Sandboxes running at the sample. */
  concurrentSandboxes: number;
  /** Sandboxes started (created or resumed) per second over the sample's interval. */
  sandboxStartRate: number;
}

/** GET /teams/{teamID}/metrics/max (E2B `MaxTeamMetric`): the largest value in the interval. */
export interface MaxTeamMetric {
  timestamp: string;
  timestampUnix: number;
  value: number;
}

/** A registered webhook as answered (E2B's shape; the signature secret is never answered). */
export interface Webhook {
  id: string;
  teamID: string;
  name: string;
  createdAt: string;
  enabled: boolean;
  url: string;
  events: string[];
}

/** What a webhook receives (E2B's payload, version v1). */
export interface WebhookPayload {
  version: "v1";
  /** The event's ID: the same in every retry of its delivery. */
  id: string;
  type: string;
  eventData: { sandbox_metadata: Record<string, string>; parent_sandbox_id?: string };
  sandboxBuildId: string;
  /** One run of the sandbox's runtime: new when it is started or restored from an image. */
  sandboxExecutionId: string;
  sandboxId: string;
  sandboxTeamId: string;
  sandboxTemplateId: string;
  timestamp: string;
}

/** One event's delivery to one webhook, with its attempts so far. */
export interface WebhookDelivery {
  id: string;
  webhookID: string;
  eventID: string;
  eventType: string;
  sandboxID: string;
  status: "pending" | "delivered" | "failed";
  attempts: number;
  /** The receiver's last HTTP status, if it answered. */
  responseStatus?: number;
  error?: string;
  createdAt: string;
  lastAttemptAt?: string;
  /** When a pending delivery is tried again. */
  nextAttemptAt?: string;
}
