/**
 * What a manifest's `meta` holds, by its `kind`: a snapshot (a named capture, usable as a
 * templateID), a paused sandbox (`sbx-<id>`, resumable on any node) or a template revision
 * (`tpl-<id>-r<n>`). The repository stores meta as opaque JSON; these guards are the only
 * readers of it.
 */

import { NetworkConfig, NewSandbox, SnapshotBody, VolumeMountBody } from "@aenv/protocol/rest";
import { z } from "zod";
import { validateNetworkSpec } from "../../network/policy.js";
import { SANDBOX_ID_RE } from "../../state/ids.js";
import type { SandboxRecord, SnapshotRecord } from "../../state/store.js";
import { fromStored, type StoredSandboxRecord, toStored } from "../../state/stored-record.js";
import type { TemplateData } from "../../state/template-catalog.js";
import { isId } from "./layout.js";
import type { Manifest } from "./repository.js";
import { UntrustedManifestError } from "./trust.js";

export type SnapshotMeta = { kind: "snapshot" } & Omit<SnapshotRecord, "imageDir" | "committed" | "uploadedBytes">;
/** A pause manifest's meta as read: the paused sandbox's record, typed. */
export interface PauseMeta {
  kind: "pause";
  sandbox: SandboxRecord;
  imageKey: string;
}
/** As written: the record in the flat shape every version reads (state/stored-record.ts). */
export interface StoredPauseMeta {
  kind: "pause";
  sandbox: StoredSandboxRecord;
  imageKey: string;
}
export interface TemplateMeta {
  kind: "template";
  template: TemplateData;
}
export type ManifestMeta = SnapshotMeta | StoredPauseMeta | TemplateMeta;

/** A pause manifest's meta for a paused sandbox's record, written by `imageKey`'s runtime. */
export const pauseMetaFor = (rec: SandboxRecord, imageKey: string): StoredPauseMeta => ({
  kind: "pause",
  sandbox: toStored(rec),
  imageKey,
});

/** Repository ID of a paused sandbox's manifest: addressable by sandbox ID from any node. */
export const pauseManifestId = (sandboxId: string) => `sbx-${sandboxId}`;

/** The repository claim a resume of this pause takes (see claims.ts). */
export const pauseClaimName = (rec: { id: string; pause?: { tag?: string } }) => `${rec.id}.${rec.pause?.tag ?? "0"}`;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;
const isStr = (v: unknown): v is string => typeof v === "string";

/** Snapshot IDs as Snapshots.publish makes them (`snap_` + hex); also a local folder name. */
const SNAPSHOT_ID_RE = /^snap_[A-Za-z0-9_-]{1,64}$/;

// What a manifest says about a sandbox is checked like a create body says it: the API's own
// schemas (and its network checks), so nothing reaches a sandbox from the repository that a
// client could not have sent. Host paths (rootfs, runtimeDir) are checked by the callers,
// which know this node's folders.
const envVars = NewSandbox.shape.envVars.unwrap();
const metadata = NewSandbox.shape.metadata.unwrap();
/** Each volume ID becomes a host folder name, each path a mount point. */
const volumeMounts = z
  .array(VolumeMountBody.extend({ volumeId: z.string().refine(isId, "not a plain ID") }))
  .max(16)
  .refine((ms) => ms.every((m) => m.path.startsWith("/")), "a mount path is not absolute");
/** The stored form is what validateNetworkSpec made of a create body; checked again, the same way. */
const network = NetworkConfig.transform((n, ctx) => {
  try {
    return validateNetworkSpec(n);
  } catch (err) {
    ctx.addIssue({ code: "custom", message: (err as Error).message });
    return z.NEVER;
  }
});
const count = z.number().int().nonnegative();
const boot = z.object({
  env: envVars,
  user: z.string().max(256).optional(),
  workdir: z.string().max(4096).optional(),
  startCmd: z.string().max(16_384).optional(),
  readyCmd: z.string().max(16_384).optional(),
});

const SnapshotMetaSchema = z.object({
  id: z.string().regex(SNAPSHOT_ID_RE),
  owner: z.string().max(64).optional(),
  names: z.array(SnapshotBody.shape.name.unwrap()).min(1).max(16),
  sandboxId: z.string().regex(SANDBOX_ID_RE),
  templateId: z.string().refine(isId, "not a plain ID"),
  alias: z.string().max(256),
  rootfs: z.string().max(4096),
  runtimeDir: z.string().max(4096),
  envdToken: z.string().max(256),
  envVars,
  network: network.optional(),
  allowInternet: z.boolean().optional(),
  volumeMounts: volumeMounts.optional(),
  boot: boot.optional(),
  cpuCount: count,
  memoryMB: count,
  diskSizeMB: count,
  sizeBytes: count,
  createdAt: count,
  imageKey: z.string().max(512).optional(),
});

/** The fields of a paused sandbox's record a resume acts on; the rest is bookkeeping. */
const PausedSandboxSchema = z.looseObject({
  // Its ID names the local sandbox folder; its pause tag names a repository claim.
  id: z.string().regex(SANDBOX_ID_RE),
  pauseTag: z.string().refine(isId, "not a plain ID").optional(),
  rootfs: z.string().max(4096),
  envVars,
  metadata,
  network: network.optional(),
  volumeMounts: volumeMounts.optional(),
  boot: boot.optional(),
});

/** Told why a manifest of the right kind was refused (the caller logs it). */
export type RejectReport = (err: UntrustedManifestError) => void;

function refuse(m: Manifest, why: string, report: RejectReport | undefined): undefined {
  report?.(new UntrustedManifestError(m.id, why));
  return undefined;
}

const issues = (e: z.ZodError) =>
  e.issues
    .slice(0, 3)
    .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
    .join("; ");

export function snapshotMetaOf(m: Manifest, report?: RejectReport): SnapshotMeta | undefined {
  const meta = m.meta;
  // Snapshots committed before kinds existed carry none: known by their shape, once.
  const kindOk = meta.kind === "snapshot" || meta.kind === undefined;
  if (!kindOk || !Array.isArray(meta.names)) return undefined;
  if (meta.id !== m.id) return refuse(m, "snapshot id is not the manifest's", report);
  const r = SnapshotMetaSchema.safeParse(meta);
  if (!r.success) return refuse(m, `snapshot malformed (${issues(r.error)})`, report);
  return { ...r.data, kind: "snapshot" };
}

export function pauseMetaOf(m: Manifest, report?: RejectReport): PauseMeta | undefined {
  const meta = m.meta;
  if (meta.kind !== "pause") return undefined;
  const r = PausedSandboxSchema.safeParse(meta.sandbox);
  if (!r.success) return refuse(m, `paused sandbox malformed (${issues(r.error)})`, report);
  if (m.id !== pauseManifestId(r.data.id)) return refuse(m, "paused sandbox ID is not the manifest's", report);
  if (typeof meta.imageKey !== "string") return refuse(m, "paused sandbox imageKey malformed", report);
  return { kind: "pause", sandbox: fromStored(r.data as unknown as StoredSandboxRecord), imageKey: meta.imageKey };
}

export function templateMetaOf(m: Manifest, report?: RejectReport): TemplateMeta | undefined {
  const meta = m.meta;
  if (meta.kind !== "template") return undefined;
  // Its ID and rootfsDir become `<templates>/<id>/<rootfsDir>`: one plain component each.
  const t = meta.template;
  if (!isObject(t) || !isId(t.id) || !isId(t.rootfsDir) || !isStr(t.name) || !Number.isSafeInteger(t.revision)) {
    return refuse(m, "template id, rootfsDir, name or revision malformed", report);
  }
  if (m.id !== `tpl-${t.id}-r${String(t.revision)}`) return refuse(m, "template is not the manifest's", report);
  return meta as unknown as TemplateMeta;
}
