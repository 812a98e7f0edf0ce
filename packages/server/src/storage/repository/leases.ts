/**
 * The two kinds of marker objects that make GC safe against commits (docs/storage.md):
 * a commit's lease lists the digests it needs; a GC lock says a collection is running.
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { ObjectInfo, RepositoryBackend } from "./backend.js";
import { GC_LOCKS, LEASES } from "./layout.js";

export interface LeaseBody {
  /** The manifest id the commit will write. */
  id: string;
  host: string;
  pid: number;
  /** Writer's clock, ms since epoch; refreshed while a long commit runs. */
  at: number;
  digests: string[];
}

export interface GcLockBody {
  host: string;
  pid: number;
  at: number;
}

export class Lease {
  private at = Date.now();

  private constructor(
    private readonly backend: RepositoryBackend,
    readonly key: string,
    private readonly body: LeaseBody,
  ) {}

  static async write(backend: RepositoryBackend, id: string, digests: string[]): Promise<Lease> {
    const body: LeaseBody = { id, host: hostname(), pid: process.pid, at: Date.now(), digests };
    const lease = new Lease(backend, `${LEASES}${randomUUID()}.json`, body);
    await backend.put(lease.key, Buffer.from(JSON.stringify(body)));
    return lease;
  }

  /** Rewrites the lease with a fresh time once a third of its TTL has passed. */
  async refreshIfOlder(ttlMs: number): Promise<void> {
    if (Date.now() - this.at < ttlMs / 3) return;
    this.at = Date.now();
    await this.backend.put(this.key, Buffer.from(JSON.stringify({ ...this.body, at: this.at })));
  }

  /** Best effort: a lease left behind by a crash expires after its TTL. */
  async release(): Promise<void> {
    await this.backend.delete(this.key).catch(() => {});
  }
}

async function readJson<T>(backend: RepositoryBackend, key: string): Promise<T | undefined> {
  const raw = await backend.get(key);
  if (!raw) return undefined;
  try {
    return JSON.parse(raw.toString("utf8")) as T;
  } catch {
    return undefined;
  }
}

/** Leases younger than ttlMs, and the keys of expired ones (left by crashed commits). */
export async function readLeases(
  backend: RepositoryBackend,
  ttlMs: number,
): Promise<{ live: LeaseBody[]; expired: string[] }> {
  const live: LeaseBody[] = [];
  const expired: string[] = [];
  for await (const o of backend.list(LEASES)) {
    const body = await readJson<LeaseBody>(backend, o.key);
    if (!body) continue; // released between list and get
    if (Date.now() - body.at > ttlMs || !Array.isArray(body.digests)) expired.push(o.key);
    else live.push(body);
  }
  return { live, expired };
}

export class GcLock {
  readonly at = Date.now();

  private constructor(
    private readonly backend: RepositoryBackend,
    readonly key: string,
  ) {}

  static async acquire(backend: RepositoryBackend): Promise<GcLock> {
    const lock = new GcLock(backend, `${GC_LOCKS}${randomUUID()}.json`);
    const body: GcLockBody = { host: hostname(), pid: process.pid, at: lock.at };
    await backend.put(lock.key, Buffer.from(JSON.stringify(body)));
    return lock;
  }

  async release(): Promise<void> {
    await this.backend.delete(this.key).catch(() => {});
  }
}

/** GC locks younger than ttlMs (a crashed GC's lock stops counting after it). */
export async function activeGcLocks(backend: RepositoryBackend, ttlMs: number): Promise<ObjectInfo[]> {
  const out: ObjectInfo[] = [];
  for await (const o of backend.list(GC_LOCKS)) {
    const body = await readJson<GcLockBody>(backend, o.key);
    if (body && Date.now() - body.at < ttlMs) out.push(o);
  }
  return out;
}

/** Keys of GC locks older than ttlMs (housekeeping). */
export async function expiredGcLocks(backend: RepositoryBackend, ttlMs: number): Promise<string[]> {
  const out: string[] = [];
  for await (const o of backend.list(GC_LOCKS)) {
    const body = await readJson<GcLockBody>(backend, o.key);
    if (body && Date.now() - body.at >= ttlMs) out.push(o.key);
  }
  return out;
}
