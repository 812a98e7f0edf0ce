/**
 * Request bodies, queries and path parameters of the control-plane API, as zod schemas: the
 * server validates every request with them at the edge, and clients take their types.
 */
import { z } from "zod";

const stringMap = z.record(z.string(), z.string());
const timeout = z.number().int().min(0).max(2_147_483_647);

const destinations = z.array(z.string().max(260)).max(1000);
/** Per-domain header transforms (E2B `SandboxNetworkRule`). */
const networkRules = z.record(
  z.string().max(260),
  z.array(z.object({ transform: z.object({ headers: stringMap.optional() }).optional() })).max(16),
);

/**
 * E2B `SandboxEgressProxyConfig` (null: none). Fields are checked by the server
 * (network/egress-proxy-config.ts) so that each bad value gets its own message.
 */
const egressProxy = z.unknown().optional();

/** E2B `SandboxNetworkConfig`; the server checks entries (network/policy.ts). */
/**
 * What one sandbox may ask for, in vCPUs and MiB: the bounds of a cold start's and a
 * template's sizing (the CLI refuses the same values before it sends them).
 */
export const SANDBOX_LIMITS = {
  cpuCount: { min: 1, max: 64 },
  memoryMB: { min: 128, max: 262_144 },
} as const;
export const CpuCount = z.number().int().min(SANDBOX_LIMITS.cpuCount.min).max(SANDBOX_LIMITS.cpuCount.max);
export const MemoryMB = z.number().int().min(SANDBOX_LIMITS.memoryMB.min).max(SANDBOX_LIMITS.memoryMB.max);

/** A template build's state (BuildStatus.status, a template's buildStatus). */
export const BuildState = z.enum(["waiting", "building", "ready", "error"]);
export type BuildState = z.infer<typeof BuildState>;

export const NetworkConfig = z.object({
  allowOut: destinations.optional(),
  denyOut: destinations.optional(),
  rules: networkRules.optional(),
  allowPublicTraffic: z.boolean().optional(),
  maskRequestHost: z.string().max(300).optional(),
  egressProxy,
  httpsPorts: z.array(z.number().int().min(1).max(65535)).max(64).optional(),
});
export type NetworkConfig = z.infer<typeof NetworkConfig>;

/** Body of PUT /sandboxes/{id}/network: replaces the outbound rules; omitted means cleared. */
export const NetworkUpdate = z.object({
  allowOut: destinations.optional(),
  denyOut: destinations.optional(),
  rules: networkRules.optional(),
  egressProxy,
  allow_internet_access: z.boolean().optional(),
});
export type NetworkUpdate = z.infer<typeof NetworkUpdate>;

/** What every sandbox-creating body shares: lifetime, metadata, env and network. */
const SandboxOptions = z.looseObject({
  timeout: timeout.optional(),
  metadata: stringMap.optional(),
  envVars: stringMap.optional(),
  allow_internet_access: z.boolean().optional(),
  allowInternetAccess: z.boolean().optional(),
  autoPause: z.boolean().optional(),
  autoResume: z.object({ enabled: z.boolean() }).optional(),
  network: NetworkConfig.optional(),
  /** E2B `SandboxIam` (workload identity): refused by the server when it names tokens. */
  iam: z
    .object({ tokens: z.record(z.string(), z.unknown()).optional() })
    .nullable()
    .optional(),
});
export type SandboxOptions = z.infer<typeof SandboxOptions>;

/** One entry of a create body's volumeMounts: a volume by name at an absolute path. */
export const VolumeMountBody = z.object({ name: z.string().min(1).max(63), path: z.string().min(1).max(512) });

/** Body of POST /sandboxes (SDK <= 2.50) and POST /v2/sandboxes (2.51+). Unknown fields are ignored. */
export const NewSandbox = SandboxOptions.extend({
  templateID: z.string().min(1).max(256),
  autoPauseMemory: z.boolean().optional(),
  secure: z.boolean().optional(),
  volumeMounts: z.array(VolumeMountBody).max(16).optional(),
});
export type NewSandbox = z.infer<typeof NewSandbox>;

/** Body of POST /sandboxes-cold: a sandbox booted straight from an image reference. */
export const ColdSandbox = SandboxOptions.extend({
  image: z.string().min(1).max(1024),
  cpuCount: CpuCount.optional(),
  memoryMB: MemoryMB.optional(),
  diskSizeMB: z.number().int().min(1024).multipleOf(1024).optional(),
});

/** What a client sends (before defaults): the CLI builds its bodies from these. */
export type NewSandboxBody = z.input<typeof NewSandbox>;
export type ColdSandboxBody = z.input<typeof ColdSandbox>;

export const TimeoutBody = z.looseObject({ timeout: timeout });
export const ConnectBody = z.looseObject({ timeout: timeout.optional(), memory: z.boolean().optional() });
export const RefreshBody = z.looseObject({ duration: z.number().int().min(0).max(3600).optional() });

export const ListQuery = z.object({
  metadata: z.string().optional(),
  state: z.string().optional(),
  limit: z.coerce.number().int().min(1).max(100).optional(),
  nextToken: z.string().optional(),
  order: z.enum(["asc", "desc"]).optional(),
  startedAfter: z.string().optional(),
  template: z.string().optional(),
});

export const MetricsQuery = z.object({
  start: z.coerce.number().int().optional(),
  end: z.coerce.number().int().optional(),
});

/** GET /sandboxes/{id}/logs: from `start` (Unix ms), at most `limit` entries. */
/** GET /teams/{teamID}/metrics: Unix seconds; the last hour when unset. */
export const TeamMetricsQuery = z.object({
  start: z.coerce.number().int().min(0).optional(),
  end: z.coerce.number().int().min(0).optional(),
});
/** GET /teams/{teamID}/metrics/max. */
export const MaxTeamMetricQuery = TeamMetricsQuery.extend({
  metric: z.enum(["concurrent_sandboxes", "sandbox_start_rate"]),
});
export const LogsQueryV1 = z.object({
  start: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(0).max(100_000).default(1000),
});

/** GET /v2/sandboxes/{id}/logs (E2B's parameters). */
export const LogsQueryV2 = z.object({
  cursor: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(0).max(1000).default(1000),
  direction: z.enum(["forward", "backward"]).default("forward"),
  level: z.enum(["debug", "info", "warn", "error"]).optional(),
  search: z.string().max(256).optional(),
});

export const SandboxIdParams = z.object({ sandboxID: z.string().min(1).max(128) });

/** At most this many sandboxes per GET /sandboxes/metrics: one answer stays small and quick. */
export const MAX_BATCH_METRICS_IDS = 100;
/** What a sandbox ID may look like in a batch (letters, digits, '-', '_'): anything else cannot name one. */
const SANDBOX_ID_FORM = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;
/**
 * GET /sandboxes/metrics: `sandbox_ids` comma-separated, as E2B's SDK sends an array
 * (explode: false); repeated parameters are taken too. Duplicates count once.
 */
export const BatchMetricsQuery = z.object({
  sandbox_ids: z
    .union([z.string(), z.array(z.string())], { error: "sandbox_ids is required (comma-separated sandbox IDs)" })
    .transform((v) => [
      ...new Set(
        (Array.isArray(v) ? v : [v])
          .flatMap((s) => s.split(","))
          .map((s) => s.trim())
          .filter(Boolean),
      ),
    ])
    .pipe(
      z
        .array(z.string().regex(SANDBOX_ID_FORM, "not a sandbox ID"))
        .min(1, "sandbox_ids names no sandbox")
        .max(MAX_BATCH_METRICS_IDS, `at most ${MAX_BATCH_METRICS_IDS} sandbox IDs per request`),
    ),
});

export const PauseBody = z.looseObject({ memory: z.boolean().optional() });
export const SnapshotBody = z.looseObject({
  name: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]*$/)
    .optional(),
});
export const ForkBody = z.looseObject({
  count: z.number().int().min(1).max(100).optional(),
  timeout: timeout.optional(),
});
/**
 * POST /v2/sandboxes/{id}/fork. The SDKs no longer cap count (the server's room does: a
 * child beyond it is a 429 in its entry); bounded here only so one request stays small.
 * memory: false forks the filesystem alone (children cold-boot from it).
 */
export const ForkBodyV2 = z.looseObject({
  count: z.number().int().min(1).max(1000).optional(),
  timeout: timeout.optional(),
  memory: z.boolean().optional(),
});
export const SnapshotListQuery = z.object({
  sandboxID: z.string().optional(),
  name: z.string().optional(),
  limit: z.coerce.number().int().min(1).max(100).optional(),
  nextToken: z.string().optional(),
});
export const SnapshotIdParams = z.object({ snapshotID: z.string().min(1).max(256) });
export const TemplateIdParams = z.object({ templateID: z.string().min(1).max(256) });

/** PATCH /templates/{id} and /v2/templates/{id} (E2B `TemplateUpdateRequest`). */
export const TemplateUpdateBody = z.looseObject({ public: z.boolean().optional() });

/**
 * GET /templates/{id}/builds/{buildID}/logs (E2B's parameters). `cursor` is Unix ms;
 * `source` (E2B's temporary or persistent store) is accepted: aenv keeps one log per build.
 */
export const BuildLogsQuery = z.object({
  cursor: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(0).max(1000).default(100),
  direction: z.enum(["forward", "backward"]).default("forward"),
  level: z.enum(["debug", "info", "warn", "error"]).optional(),
  source: z.enum(["temporary", "persistent"]).optional(),
});
export type BuildLogsQuery = z.infer<typeof BuildLogsQuery>;

// ---- volumes: the control plane (/volumes) and the content API (/volumecontent)

/** Volume names: what Sandbox.create({volumeMounts}) sends, so unique and path-safe. */
export const VolumeName = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[A-Za-z0-9][A-Za-z0-9_-]*$/, "use letters, digits, '-' and '_' (starting with a letter or digit)");
export const NewVolume = z.looseObject({ name: VolumeName });
export const VolumeIdParams = z.object({ volumeID: z.string().min(1).max(128) });

const queryBool = z.enum(["true", "false"]).transform((v) => v === "true");
const queryUint = (max: number) => z.coerce.number().int().min(0).max(max);
/** Query of every /volumecontent call: the path inside the volume, plus what each call takes. */
export const VolumeContentQuery = z.object({
  path: z.string().min(1).max(4096),
  depth: queryUint(64).optional(),
  uid: queryUint(4_294_967_294).optional(),
  gid: queryUint(4_294_967_294).optional(),
  mode: queryUint(0o7777).optional(),
  force: queryBool.optional(),
});
/** PATCH /volumecontent/{id}/path: metadata to change. */
export const VolumeMetadataBody = z.looseObject({
  uid: z.number().int().min(0).max(4_294_967_294).optional(),
  gid: z.number().int().min(0).max(4_294_967_294).optional(),
  mode: z.number().int().min(0).max(0o7777).optional(),
});

// ---- secrets (/secrets): values are write-only, and sent only to the hosts they are bound to

const SecretMetadata = z
  .record(z.string().min(1).max(128), z.string().max(1024))
  .refine((m) => Object.keys(m).length <= 32, "at most 32 metadata entries")
  .refine((m) => JSON.stringify(m).length <= 8192, "metadata over 8192 bytes");
/** Secret names are lower-cased; `sec_` is the ID prefix; `{`, `}` and controls break placeholders. */
export const SecretName = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[^{}\p{Cc}\s/]+$/u, "no '{', '}', '/', spaces or control characters")
  .refine((n) => !n.toLowerCase().startsWith("sec_"), "the sec_ prefix is reserved for secret IDs");
/**
 * What a secret value may hold. It is sent as (part of) an HTTP header value, so it is printable
 * ASCII, spaces and tabs: a CR or LF would end the header (or split it on a raw WebSocket
 * handshake), and non-ASCII bytes are read differently by different servers.
 */
export const SECRET_VALUE_CHARS = /^[\t\x20-\x7e]+$/;
export const SecretValue = z
  .string()
  .min(1)
  .max(65_536)
  .regex(SECRET_VALUE_CHARS, "a secret value is sent in an HTTP header: printable ASCII, spaces and tabs only");
/**
 * The hosts a secret may be sent to (aenv's own field: E2B's API has none): domain names and
 * `*.domain` wildcards, as network rule keys are written. A network rule that names the
 * secret must be for one of them, and the egress proxy fills the secret in only for them. A
 * secret without any is never sent anywhere.
 */
export const SecretAllowedHosts = z.array(z.string().min(1).max(255)).min(1).max(100);
export const NewSecret = z.looseObject({
  name: SecretName,
  value: SecretValue,
  metadata: SecretMetadata.optional(),
  allowedHosts: SecretAllowedHosts.optional(),
});
/** allowedHosts can change only with a new value: a binding never redirects a value already set. */
export const SecretUpdate = z.looseObject({
  value: SecretValue,
  metadata: SecretMetadata.optional(),
  allowedHosts: SecretAllowedHosts.optional(),
});
export const SecretIdParams = z.object({ secretID: z.string().min(1).max(160) });
export const SecretListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).optional(),
  nextToken: z.string().optional(),
});

/** E2B's sandbox lifecycle events a webhook subscribes to (`forked`: aenv's, a fork's child). */
export const WEBHOOK_EVENT_TYPES = [
  "sandbox.lifecycle.created",
  "sandbox.lifecycle.killed",
  "sandbox.lifecycle.updated",
  "sandbox.lifecycle.paused",
  "sandbox.lifecycle.resumed",
  "sandbox.lifecycle.forked",
] as const;
export const WebhookEventType = z.enum(WEBHOOK_EVENT_TYPES);
export type WebhookEventType = z.infer<typeof WebhookEventType>;
const webhookName = z.string().trim().min(1).max(128);
/** http(s) only; where it may point is the server's check (its address, at each delivery). */
const webhookUrl = z
  .string()
  .max(2048)
  .refine((u) => URL.canParse(u) && /^https?:$/.test(new URL(u).protocol), "must be an http(s) URL");
const webhookEvents = z.array(WebhookEventType).min(1).max(WEBHOOK_EVENT_TYPES.length);
/** Signs each delivery (`e2b-signature`); never answered back. */
const signatureSecret = z.string().min(8).max(256);
/** POST /events/webhooks (E2B's body). */
export const NewWebhook = z.looseObject({
  name: webhookName,
  url: webhookUrl,
  enabled: z.boolean().optional(),
  events: webhookEvents,
  signatureSecret,
});
export type NewWebhook = z.infer<typeof NewWebhook>;
/** PATCH /events/webhooks/{webhookID}: the fields given replace the webhook's. */
export const WebhookUpdate = z.looseObject({
  name: webhookName.optional(),
  url: webhookUrl.optional(),
  enabled: z.boolean().optional(),
  events: webhookEvents.optional(),
  signatureSecret: signatureSecret.optional(),
});
export type WebhookUpdate = z.infer<typeof WebhookUpdate>;
export const WebhookIdParams = z.object({ webhookID: z.string().min(1).max(64) });
export const WEBHOOK_DELIVERY_STATUSES = ["pending", "delivered", "failed"] as const;
/** GET /events/webhooks/{webhookID}/deliveries: newest first. */
export const WebhookDeliveriesQuery = z.object({
  limit: z.coerce.number().int().min(1).max(1000).optional(),
  deliveryStatus: z.enum(WEBHOOK_DELIVERY_STATUSES).optional(),
  eventType: WebhookEventType.optional(),
});
export type WebhookDeliveriesQuery = z.infer<typeof WebhookDeliveriesQuery>;

/** GET /cluster/image-layers (gateway → node): `cold`, any image (as /sandboxes-cold takes). */
export const ImageLayersQuery = z.object({
  ref: z.string().min(1).max(1024),
  cold: z
    .enum(["0", "1"])
    .optional()
    .transform((v) => v === "1"),
});

/**
 * An API key's caps (aenv's): concurrent sandboxes (running, not paused), creates a second,
 * and API calls per window. Absent: no cap. Enforced per key, cluster-wide through gateways.
 */
export const ApiKeyLimits = z.strictObject({
  maxSandboxes: z.number().int().min(1).max(1_000_000).optional(),
  createsPerSecond: z.number().min(0.01).max(100_000).optional(),
  callsPerWindow: z.number().int().min(1).max(100_000_000).optional(),
  /** The calls' window in seconds (default 30, as E2B counts its 20,000 lifecycle calls). */
  windowSeconds: z.number().int().min(1).max(86_400).optional(),
});
export type ApiKeyLimits = z.infer<typeof ApiKeyLimits>;
const apiKeyName = z.string().trim().min(1).max(128);
/** POST /api-keys (E2B's `NewTeamAPIKey`, with aenv's `limits`). */
export const NewApiKey = z.looseObject({ name: apiKeyName, limits: ApiKeyLimits.optional() });
export type NewApiKey = z.infer<typeof NewApiKey>;
/** PATCH /api-keys/{apiKeyID}: a new name, new limits (null: none). */
export const ApiKeyUpdate = z.looseObject({
  name: apiKeyName.optional(),
  limits: ApiKeyLimits.nullable().optional(),
});
export type ApiKeyUpdate = z.infer<typeof ApiKeyUpdate>;
export const ApiKeyIdParams = z.object({ apiKeyID: z.string().min(1).max(64) });
