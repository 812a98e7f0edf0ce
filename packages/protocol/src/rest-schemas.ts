/**
 * Request bodies, queries and path parameters of the control-plane API, as zod schemas: the
 * server validates every request with them at the edge, and clients take their types.
 */
import { z } from "zod";

const stringMap = z.record(z.string(), z.string());
const timeout = z.number().int().min(0).max(2_147_483_647);

/** What every sandbox-creating body shares: lifetime, metadata, env and network. */
const SandboxOptions = z.looseObject({
  timeout: timeout.optional(),
  metadata: stringMap.optional(),
  envVars: stringMap.optional(),
  allow_internet_access: z.boolean().optional(),
  allowInternetAccess: z.boolean().optional(),
  autoPause: z.boolean().optional(),
  autoResume: z.object({ enabled: z.boolean() }).optional(),
  network: z.looseObject({}).optional(),
});
export type SandboxOptions = z.infer<typeof SandboxOptions>;

/** Body of POST /sandboxes (SDK <= 2.50) and POST /v2/sandboxes (2.51+). Unknown fields are ignored. */
export const NewSandbox = SandboxOptions.extend({
  templateID: z.string().min(1).max(256),
  autoPauseMemory: z.boolean().optional(),
  secure: z.boolean().optional(),
  volumeMounts: z.array(z.object({ name: z.string(), path: z.string() })).optional(),
});
export type NewSandbox = z.infer<typeof NewSandbox>;

/** Body of POST /sandboxes-cold: a sandbox booted straight from an image reference. */
export const ColdSandbox = SandboxOptions.extend({
  image: z.string().min(1).max(1024),
  cpuCount: z.number().int().min(1).max(64).optional(),
  memoryMB: z.number().int().min(128).max(262_144).optional(),
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

export const SandboxIdParams = z.object({ sandboxID: z.string().min(1).max(128) });

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
export const SnapshotListQuery = z.object({
  sandboxID: z.string().optional(),
  name: z.string().optional(),
  limit: z.coerce.number().int().min(1).max(100).optional(),
  nextToken: z.string().optional(),
});
export const SnapshotIdParams = z.object({ snapshotID: z.string().min(1).max(256) });
export const TemplateIdParams = z.object({ templateID: z.string().min(1).max(256) });
