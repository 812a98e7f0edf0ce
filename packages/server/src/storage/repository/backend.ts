/**
 * The object-store seam under the snapshot repository: keys → immutable bytes. A folder
 * (posix_fs) and an S3 bucket implement it with the same key layout (see layout.ts), so the
 * repository, cache and GC above it are written once.
 */
import type { Readable } from "node:stream";

export interface ObjectInfo {
  key: string;
  /** Stored size in bytes. */
  size: number;
  /** When the object was last written (GC's grace period is measured against it). */
  modified: Date;
}

export interface RepositoryBackend {
  /** "posix_fs /srv/repo", "s3 http://host:9000 bucket/prefix" — for logs and errors. */
  readonly description: string;
  /**
   * Stores an object atomically: readers see either nothing (or the previous version) or the
   * whole new body, never a prefix of it. Overwriting an existing key is allowed.
   */
  put(key: string, body: Uint8Array | Readable): Promise<void>;
  /**
   * Creates a small object only if the key does not exist yet, atomically: of two callers
   * racing, exactly one gets true. (S3 needs conditional writes, `If-None-Match: *`.)
   */
  putIfAbsent(key: string, body: Uint8Array): Promise<boolean>;
  /** The whole object, or undefined when the key does not exist. */
  get(key: string): Promise<Buffer | undefined>;
  /** Size and modification time, or undefined when the key does not exist. */
  head(key: string): Promise<ObjectInfo | undefined>;
  /** Every object whose key starts with prefix, in no particular order. */
  list(prefix: string): AsyncIterable<ObjectInfo>;
  /** Removes an object; removing a missing key is not an error. */
  delete(key: string): Promise<void>;
  /**
   * Proves at start that the backend is usable (exists, reachable, writable) and otherwise
   * rejects with a BackendUnavailableError whose message is one line saying what is wrong.
   */
  check(): Promise<void>;
}

/** An operation on the backend failed (I/O error, network, permissions…); the message names the key. */
export class BackendError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "BackendError";
  }
}

/** check() failed: the repository cannot be used at all. One line, meant for a fatal log. */
export class BackendUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "BackendUnavailableError";
  }
}

const KEY_RE = /^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/;

/** Keys are relative slash-separated names without "." / ".." segments (they become file paths). */
export function assertKey(key: string): void {
  if (!KEY_RE.test(key) || key.split("/").some((s) => s === "." || s === "..")) {
    throw new BackendError(`invalid repository key '${key}'`);
  }
}

/** A short description of an error for one-line messages (SDK errors carry name and code). */
export function describeError(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const e = err as Error & { code?: string; $metadata?: { httpStatusCode?: number } };
  const status = e.$metadata?.httpStatusCode;
  const parts = [e.code && !e.message.includes(e.code) ? `${e.code}: ${e.message}` : e.message || e.name];
  if (status) parts.push(`(HTTP ${status})`);
  return parts.join(" ").replace(/\s*\n\s*/g, " ");
}
