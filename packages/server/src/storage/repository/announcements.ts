/**
 * Commits announced before they land (`pending/<id>.json`): a snapshot is usable on every
 * server the moment it is taken, because a server that misses it finds the announcement and
 * waits for the manifest instead of answering 404.
 */
import type { RepositoryBackend } from "./backend.js";
import { assertId, isId, PENDING } from "./layout.js";
import type { Announcement, Manifest } from "./repository.js";
import type { RepositoryKey } from "./signing.js";
import { UntrustedManifestError } from "./trust.js";

export async function announce(
  backend: RepositoryBackend,
  key: RepositoryKey,
  id: string,
  names: string[],
): Promise<void> {
  assertId(id);
  const a: Announcement = { id, names, at: Date.now() };
  const k = `${PENDING}${id}.json`;
  await backend.put(k, key.seal("announcement", k, a));
}

export async function withdraw(backend: RepositoryBackend, id: string): Promise<void> {
  assertId(id);
  await backend.delete(`${PENDING}${id}.json`);
}

/** Announcements newer than `maxAgeMs` (an older one is a commit that never ended). */
export async function announced(
  backend: RepositoryBackend,
  key: RepositoryKey,
  maxAgeMs = 30 * 60_000,
  onUntrusted: (err: UntrustedManifestError) => void = () => {},
): Promise<Announcement[]> {
  const out: Announcement[] = [];
  for await (const o of backend.list(PENDING)) {
    if (Date.now() - o.modified.getTime() > maxAgeMs) continue;
    const raw = await backend.get(o.key).catch(() => undefined);
    if (!raw) continue;
    try {
      const a = key.open("announcement", o.key, raw) as Partial<Announcement> | null;
      if (!a) continue;
      // Its id is looked up as a manifest next: only a valid id, the one it is stored under.
      if (!isId(a.id) || o.key !== `${PENDING}${a.id}.json` || !Array.isArray(a.names)) {
        onUntrusted(new UntrustedManifestError(o.key, "announcement id missing or not the key it is stored under"));
        continue;
      }
      out.push({ id: a.id, names: a.names.filter((n): n is string => typeof n === "string"), at: a.at ?? 0 });
    } catch (err) {
      // Written whole (atomic puts): unreadable or unsigned means not written by a node.
      if (err instanceof UntrustedManifestError) onUntrusted(err);
    }
  }
  return out;
}

/** The manifest once `get` finds it, polling with backoff until `timeoutMs`. */
export async function waitFor(
  get: (id: string) => Promise<Manifest | undefined>,
  id: string,
  timeoutMs: number,
): Promise<Manifest | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
    const m = await get(id).catch(() => undefined);
    if (m || Date.now() > deadline) return m;
    await new Promise((r) => setTimeout(r, delay));
  }
}
