/**
 * What a manifest's `meta` holds, by its `kind`: a snapshot (a named capture, usable as a
 * templateID), a paused sandbox (`sbx-<id>`, resumable on any node) or a template revision
 * (`tpl-<id>-r<n>`). The repository stores meta as opaque JSON; these guards are the only
 * readers of it.
 */
import type { SandboxRecord, SnapshotRecord } from "../../state/store.js";
import type { TemplateData } from "../../templates/catalog.js";
import type { Manifest } from "./repository.js";

export type SnapshotMeta = { kind: "snapshot" } & Omit<SnapshotRecord, "imageDir" | "committed" | "uploadedBytes">;
export interface PauseMeta {
  kind: "pause";
  sandbox: SandboxRecord;
  imageKey: string;
}
export interface TemplateMeta {
  kind: "template";
  template: TemplateData;
}
export type ManifestMeta = SnapshotMeta | PauseMeta | TemplateMeta;

/** Repository ID of a paused sandbox's manifest: addressable by sandbox ID from any node. */
export const pauseManifestId = (sandboxId: string) => `sbx-${sandboxId}`;

/** The repository claim a resume of this pause takes (see claims.ts). */
export const pauseClaimName = (rec: { id: string; pauseTag?: string }) => `${rec.id}.${rec.pauseTag ?? "0"}`;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

export function snapshotMetaOf(m: Manifest): SnapshotMeta | undefined {
  const meta = m.meta;
  // Snapshots committed before kinds existed carry none: known by their shape, once.
  const kindOk = meta.kind === "snapshot" || meta.kind === undefined;
  if (!kindOk || meta.id !== m.id || !Array.isArray(meta.names)) return undefined;
  return { ...(meta as Omit<SnapshotMeta, "kind">), kind: "snapshot" };
}

export function pauseMetaOf(m: Manifest): PauseMeta | undefined {
  const meta = m.meta;
  if (meta.kind !== "pause" || !isObject(meta.sandbox)) return undefined;
  return meta as unknown as PauseMeta;
}

export function templateMetaOf(m: Manifest): TemplateMeta | undefined {
  const meta = m.meta;
  if (meta.kind !== "template" || !isObject(meta.template) || typeof meta.template.id !== "string") return undefined;
  return meta as unknown as TemplateMeta;
}
