/**
 * Key layout shared by every backend (a folder and a bucket look the same):
 *   chunks/<aa>/<sha256>.zst     zstd frame of one chunk; sha256 of the uncompressed bytes
 *   manifests/<id>.json          one per snapshot/template/paused sandbox, written last
 *   leases/<uuid>.json           digests a commit in flight needs (GC treats them as live)
 *   gc-locks/<uuid>.json         a GC in progress (commits wait before trusting existence checks)
 *   pending/<id>.json            a snapshot taken and not yet committed: readers wait for it
 *   claims/<name>.json           create-if-absent markers: one pause image resumed by one node
 */
/** Largest chunk (content-defined cut points, see cdc.ts). */
export { CDC_MAX as CHUNK_BYTES } from "./cdc.js";

export const CHUNKS = "chunks/";
export const MANIFESTS = "manifests/";
export const LEASES = "leases/";
export const GC_LOCKS = "gc-locks/";
export const PENDING = "pending/";
export const CLAIMS = "claims/";

const SHA_RE = /^[0-9a-f]{64}$/;
/** Sandbox IDs (sbx-…), snapshot IDs (snap_…), template names: no path separators, no leading dot. */
const ID_RE = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/;

export function isDigest(s: string): boolean {
  return SHA_RE.test(s);
}

/** Also what every name from a manifest must be before it becomes one path component here. */
export const isId = (s: unknown): s is string => typeof s === "string" && ID_RE.test(s);

export function assertId(id: string): void {
  if (!isId(id)) throw new Error(`invalid snapshot id '${id}'`);
}

export function chunkKey(sha: string): string {
  return `${CHUNKS}${sha.slice(0, 2)}/${sha}.zst`;
}

/** The digest a chunk key names, or undefined for anything else under chunks/. */
export function digestOfChunkKey(key: string): string | undefined {
  const m = /^chunks\/[0-9a-f]{2}\/([0-9a-f]{64})\.zst$/.exec(key);
  return m?.[1];
}

export function manifestKey(id: string): string {
  assertId(id);
  return `${MANIFESTS}${id}.json`;
}

export function idOfManifestKey(key: string): string | undefined {
  const m = /^manifests\/([^/]+)\.json$/.exec(key);
  return m?.[1];
}
