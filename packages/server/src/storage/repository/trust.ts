/**
 * Whoever can write the repository folder or bucket is not trusted with this host: every
 * manifest is checked here before any of it becomes a file name, a path or a lookup key. A
 * manifest that fails is unusable (an UntrustedManifestError, logged by the caller); nothing
 * in it is acted on.
 */
import { CDC_MAX } from "./cdc.js";
import { isDigest, isId } from "./layout.js";
import type { Manifest, ManifestFile } from "./repository.js";

/** A repository entry that is malformed or names things it must not; never acted on. */
export class UntrustedManifestError extends Error {
  constructor(
    readonly entry: string,
    reason: string,
  ) {
    super(`repository entry '${entry}' rejected: ${reason}`);
    this.name = "UntrustedManifestError";
  }
}

/** One path component: no separators, no leading dot (so never "." / ".." / hidden). */
export const isSafeSegment = isId;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

function checkFile(entry: string, f: unknown): ManifestFile {
  const bad = (why: string) => new UntrustedManifestError(entry, why);
  if (!isObject(f) || !isSafeSegment(f.name)) throw bad("a file name is not a plain file name");
  if (!isCount(f.size) || !Array.isArray(f.chunks)) throw bad(`file '${f.name}' has no valid size or chunk list`);
  let sum = 0;
  for (const c of f.chunks as unknown[]) {
    if (!isObject(c) || typeof c.sha256 !== "string" || !isDigest(c.sha256)) throw bad("a chunk digest is not sha256");
    if (!isCount(c.size) || c.size === 0 || c.size > CDC_MAX) throw bad("a chunk size is out of range");
    sum += c.size;
  }
  if (sum !== f.size) throw bad(`file '${f.name}' size does not match its chunks`);
  return f as unknown as ManifestFile;
}

/**
 * The manifest stored under `manifests/<id>.json`, checked: its own id must be the one it is
 * stored under (ids become local folder names), file names plain, chunks real digests.
 */
export function checkManifest(id: string, raw: unknown): Manifest {
  const bad = (why: string) => new UntrustedManifestError(id, why);
  if (!isObject(raw)) throw bad("not a JSON object");
  if (raw.version !== 2) throw bad(`version ${String(raw.version)}; this aenv reads version 2`);
  if (raw.id !== id) throw bad(`its id ${JSON.stringify(raw.id)} is not the id it is stored under`);
  if (typeof raw.createdAt !== "string" || !isObject(raw.meta) || !Array.isArray(raw.files)) {
    throw bad("createdAt, meta or files missing");
  }
  const names = new Set<string>();
  for (const f of raw.files as unknown[]) {
    const file = checkFile(id, f);
    if (names.has(file.name)) throw bad(`file '${file.name}' listed twice`);
    names.add(file.name);
  }
  return raw as unknown as Manifest;
}
