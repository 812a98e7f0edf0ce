import { CpuCount, MemoryMB } from "@aenv/protocol/rest";
import { z } from "zod";

/** POST /v3/templates (and the older POST /v2/templates) body. */
export const TemplateRequest = z.looseObject({
  name: z.string().min(1).max(256).optional(),
  alias: z.string().min(1).max(256).optional(),
  tags: z.array(z.string().max(128)).max(32).optional(),
  cpuCount: CpuCount.optional(),
  memoryMB: MemoryMB.optional(),
  minFreeDiskMb: z.number().int().min(0).optional(),
});
export type TemplateRequest = z.infer<typeof TemplateRequest>;

export const StepType = z.enum(["RUN", "ENV", "ARG", "WORKDIR", "USER", "COPY", "EXPOSE", "VOLUME", "LABEL", "ADD"]);

export const BuildStep = z.looseObject({
  type: z.string().min(1).max(32),
  args: z.array(z.string()).max(10_000).default([]),
  filesHash: z
    .string()
    .regex(/^[A-Za-z0-9]{1,128}$/)
    .optional(),
  force: z.boolean().optional(),
});
export type BuildStep = z.infer<typeof BuildStep>;

/**
 * E2B's `fromImageRegistry`: credentials for the base image's registry, for this build's pull
 * only (kept in memory while it runs; never in the template, its build record or a log).
 */
export const RegistryAccess = z.discriminatedUnion("type", [
  z.looseObject({
    type: z.literal("registry"),
    username: z.string().min(1).max(1024),
    password: z.string().min(1).max(65_536),
  }),
  z.looseObject({
    type: z.literal("aws"),
    awsAccessKeyId: z.string().min(1).max(1024),
    awsSecretAccessKey: z.string().min(1).max(1024),
    awsRegion: z.string().min(1).max(64),
  }),
  z.looseObject({ type: z.literal("gcp"), serviceAccountJson: z.string().min(1).max(65_536) }),
]);
export type RegistryAccess = z.infer<typeof RegistryAccess>;

/** POST /v2/templates/{templateID}/builds/{buildID} body (E2B TemplateBuildStartV2). */
export const BuildStart = z.looseObject({
  fromImage: z.string().min(1).max(1024).optional(),
  fromTemplate: z.string().min(1).max(256).optional(),
  fromImageRegistry: RegistryAccess.optional(),
  force: z.boolean().optional(),
  steps: z.array(BuildStep).max(1000).default([]),
  startCmd: z.string().max(65_536).optional(),
  readyCmd: z.string().max(65_536).optional(),
});
export type BuildStart = z.infer<typeof BuildStart>;

export const BuildStatusQuery = z.object({
  logsOffset: z.coerce.number().int().min(0).optional(),
  limit: z.coerce.number().int().min(1).max(10_000).optional(),
});

/**
 * Checks every step is one we run, before anything starts, so a typo fails the request
 * instead of the build. EXPOSE/VOLUME/LABEL are metadata only and accepted.
 */
export function validateSteps(steps: BuildStep[]): string | undefined {
  for (const [i, s] of steps.entries()) {
    const where = `step ${i + 1} (${s.type})`;
    const t = StepType.safeParse(s.type.toUpperCase());
    if (!t.success) return `${where}: unsupported step type; supported: RUN, ENV, ARG, WORKDIR, USER, COPY`;
    switch (t.data) {
      case "RUN":
        if (!s.args[0]?.trim()) return `${where}: needs a command`;
        break;
      case "ENV":
      case "ARG":
        if (t.data === "ENV" && s.args.length % 2 !== 0) return `${where}: needs key/value pairs`;
        if (!s.args[0]) return `${where}: needs a name`;
        break;
      case "WORKDIR":
      case "USER":
        if (!s.args[0]?.trim()) return `${where}: needs an argument`;
        if (t.data === "USER" && !/^[a-z_][a-z0-9_-]{0,31}$|^\d+$/.test(s.args[0]))
          return `${where}: invalid user name`;
        break;
      case "COPY":
      case "ADD":
        if (!s.args[0] || !s.args[1]) return `${where}: needs a source and a destination`;
        if (!s.filesHash) return `${where}: needs filesHash (upload the files first)`;
        break;
      default:
        break;
    }
  }
  return undefined;
}
