/**
 * What a manifest's `meta` holds, by its `kind`: a snapshot (a named capture, usable as a
 * templateID), a paused sandbox (`sbx-<id>`, resumable on any node) or a template revision
 * (`tpl-<id>-r<n>`). The repository stores meta as opaque JSON; these guards are the only
 * readers of it.
 */

import { SANDBOX_ID_RE } from "../../orchestrator/ids.js";
import type { SandboxRecord, SnapshotRecord } from "../../state/store.js";
import type { TemplateData } from "../../templates/catalog.js";
import { isId } from "./layout.js";
import type { Manifest } from "./repository.js";
import { UntrustedManifestError } from "./trust.js";

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
const isStr = (v: unknown): v is string => typeof v === "string";
const isStrMap = (v: unknown) => v === undefined || (isObject(v) && Object.values(v).every(isStr));

/**
 * Volume mounts a manifest carries: each volume ID becomes a host folder name, each path a
 * mount point; anything else in them is refused. (Guards below are the repository's word,
 * checked: see trust.ts. Host paths in them are checked against this node's folders by the
 * callers, which know them.)
 */
function mountsOk(v: unknown): boolean {
  if (v === undefined) return true;
  return (
    Array.isArray(v) &&
    v.every((m) => isObject(m) && isStr(m.name) && isStr(m.path) && m.path.startsWith("/") && isId(m.volumeId))
  );
}

/** Told why a manifest of the right kind was refused (the caller logs it). */
export type RejectReport = (err: UntrustedManifestError) => void;

function refuse(m: Manifest, why: string, report: RejectReport | undefined): undefined {
  report?.(new UntrustedManifestError(m.id, why));
  return undefined;
}

export function snapshotMetaOf(m: Manifest, report?: RejectReport): SnapshotMeta | undefined {
  const meta = m.meta;
  // Snapshots committed before kinds existed carry none: known by their shape, once.
  const kindOk = meta.kind === "snapshot" || meta.kind === undefined;
  if (!kindOk || meta.id !== m.id || !Array.isArray(meta.names)) return undefined;
  if (!meta.names.every(isStr) || !isStr(meta.rootfs) || !isStr(meta.runtimeDir) || !isStr(meta.envdToken)) {
    return refuse(m, "snapshot names, rootfs, runtimeDir or envdToken malformed", report);
  }
  if (!isStr(meta.templateId) || !isStrMap(meta.envVars) || !mountsOk(meta.volumeMounts)) {
    return refuse(m, "snapshot templateId, envVars or volumeMounts malformed", report);
  }
  return { ...(meta as Omit<SnapshotMeta, "kind">), kind: "snapshot" };
}

export function pauseMetaOf(m: Manifest, report?: RejectReport): PauseMeta | undefined {
  const meta = m.meta;
  if (meta.kind !== "pause") return undefined;
  const sbx = meta.sandbox;
  // Its ID names the local sandbox folder; its pause tag names a repository claim.
  if (!isObject(sbx) || !isStr(sbx.id) || !SANDBOX_ID_RE.test(sbx.id) || m.id !== pauseManifestId(sbx.id)) {
    return refuse(m, "paused sandbox ID malformed or not the manifest's", report);
  }
  if (!isStr(sbx.rootfs) || (sbx.pauseTag !== undefined && !isId(sbx.pauseTag)) || !mountsOk(sbx.volumeMounts)) {
    return refuse(m, "paused sandbox rootfs, pauseTag or volumeMounts malformed", report);
  }
  if (!isStrMap(sbx.envVars) || !isStrMap(sbx.metadata) || !isStr(meta.imageKey)) {
    return refuse(m, "paused sandbox envVars, metadata or imageKey malformed", report);
  }
  return meta as unknown as PauseMeta;
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
