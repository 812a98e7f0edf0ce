import { posix } from "node:path";
import { InvalidRequestError, NotFoundError } from "@aenv/edge/errors";
import type { SandboxVolumeMount } from "../state/store.js";

/** What the orchestrator needs to know about volumes (storage/volumes/catalog.ts has it). */
export interface VolumeLookup {
  /** A volume of `owner` (absent: the operator) by name: names are each API key's own. */
  byName(name: string, owner: string | undefined): { id: string; name: string } | undefined;
  get(id: string): { id: string; name: string } | undefined;
  /** Host folder bind-mounted into the sandbox. */
  root(id: string): string;
}

/** Mount points that would hide what every sandbox needs (envd, proc, devices, DNS). */
const RESERVED = ["/.aenv", "/proc", "/dev", "/sys", "/etc/resolv.conf"];

const under = (p: string, dir: string) => p === dir || p.startsWith(`${dir}/`);

/** Checks a mount point: absolute, canonical, not the root or a reserved place. */
export function checkMountPath(path: string): void {
  if (!path.startsWith("/") || posix.normalize(path) !== path || path.endsWith("/") || path.includes("\0")) {
    throw new InvalidRequestError(
      `volume mount path '${path}' must be an absolute, normalised path (no '..', no '//')`,
    );
  }
  if (path === "/") throw new InvalidRequestError("a volume cannot be mounted at /");
  const r = RESERVED.find((d) => under(path, d) || under(d, path));
  if (r) throw new InvalidRequestError(`volume mount path '${path}' conflicts with ${r}, which aenv needs`);
}

/**
 * A create body's volumeMounts, resolved to volumes now. Synchronous on purpose: the caller
 * registers the sandbox right after, so a volume destroyed meanwhile cannot slip in between.
 */
export function resolveMounts(
  volumes: VolumeLookup,
  mounts: ReadonlyArray<{ name: string; path: string }>,
  owner: string | undefined,
): SandboxVolumeMount[] {
  const out: SandboxVolumeMount[] = [];
  for (const m of mounts) {
    checkMountPath(m.path);
    const other = out.find((o) => under(m.path, o.path) || under(o.path, m.path));
    if (other) throw new InvalidRequestError(`volume mount paths '${other.path}' and '${m.path}' overlap`);
    const vol = volumes.byName(m.name, owner);
    if (!vol) throw new NotFoundError(`volume '${m.name}' not found`);
    out.push({ name: vol.name, path: m.path, volumeId: vol.id });
  }
  return out;
}

/**
 * The mounts of a sandbox started from a snapshot. A checkpoint restores only with a mount at
 * every path it was taken with, so: the snapshot's own volumes by default, or volumes the
 * request names for exactly those paths (another volume at the same path is fine).
 */
export function mountsForSnapshot(
  volumes: VolumeLookup,
  snapshotId: string,
  taken: ReadonlyArray<SandboxVolumeMount>,
  requested: ReadonlyArray<{ name: string; path: string }> | undefined,
  owner: string | undefined,
): SandboxVolumeMount[] {
  const want = [...taken.map((m) => m.path)].sort().join(",");
  if (requested?.length) {
    const got = [...requested.map((m) => m.path)].sort().join(",");
    if (got !== want) {
      throw new InvalidRequestError(
        `snapshot '${snapshotId}' was taken with volumes at [${want}]; volumeMounts must name exactly those paths`,
      );
    }
    return resolveMounts(volumes, requested, owner);
  }
  for (const m of taken) {
    if (!volumes.get(m.volumeId)) {
      throw new InvalidRequestError(
        `snapshot '${snapshotId}' was taken with volume '${m.name}' at ${m.path}, which no longer exists; name a volume for ${m.path} in volumeMounts`,
      );
    }
  }
  return taken.map((m) => ({ ...m }));
}

/** Which sandboxes use a volume (running, paused or starting): those block its removal. */
export function volumeUsers(
  records: Iterable<{ id: string; volumeMounts?: SandboxVolumeMount[] }>,
  volumeId: string,
): string[] {
  const out: string[] = [];
  for (const r of records) if (r.volumeMounts?.some((m) => m.volumeId === volumeId)) out.push(r.id);
  return out;
}
