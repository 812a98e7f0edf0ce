import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { after, before } from "node:test";
import type { RepositoryBackend } from "../../src/storage/repository/backend.js";
import { nextCut } from "../../src/storage/repository/cdc.js";
import { ChunkCache } from "../../src/storage/repository/chunk-cache.js";
import { CHUNKS } from "../../src/storage/repository/layout.js";
import { RepositoryKey } from "../../src/storage/repository/signing.js";
import { startS3, type TestS3 } from "./s3.js";

export const MiB = 1024 * 1024;
/** Stands in for the cluster key (AENV_REPOSITORY_KEY). */
export const testKey = new RepositoryKey("test repository key 0123456789abcdef");
const root = mkdtempSync("/var/tmp/aenv-repo-test-");
after(() => rmSync(root, { recursive: true, force: true }));

let seq = 0;
export const fresh = (name: string) => {
  const d = join(root, `${name}-${++seq}`);
  mkdirSync(d, { recursive: true });
  return d;
};

export function folder(files: Record<string, Buffer>): string {
  const dir = fresh("src");
  for (const [f, data] of Object.entries(files)) writeFileSync(join(dir, f), data);
  return dir;
}

/**
 * Deterministic pseudo-random bytes (xorshift32): the same seed gives the same bytes, hence the
 * same content-defined cut points, on every run. zstd cannot compress them.
 */
export function seeded(n: number, seed: number): Buffer {
  const words = new Uint32Array(Math.ceil(n / 4));
  let x = Math.imul(seed + 1, 0x9e3779b9) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  return Buffer.from(words.buffer, 0, n);
}

export const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/** The chunks a commit must cut `data` into, from cdc.ts's cut points (not from offsets). */
export function cdcPieces(data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let off = 0; off < data.length; ) {
    const n = nextCut(data.subarray(off));
    out.push(data.subarray(off, off + n));
    off += n;
  }
  return out;
}

/** Chunk refs as a manifest lists them for a file holding `data`. */
export const refsOf = (data: Buffer) => cdcPieces(data).map((p) => ({ sha256: sha256(p), size: p.length }));
export const digestsOf = (data: Buffer) => cdcPieces(data).map(sha256);
/** How many distinct chunks (objects in the repository) these files need. */
export const distinctChunks = (...files: Buffer[]) => new Set(files.flatMap(digestsOf)).size;
export const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** Wraps a backend to count chunk gets and to inject behaviour before puts. */
export class SpyBackend implements RepositoryBackend {
  chunkGets = 0;
  puts = 0;
  /** Keys of the puts the inner backend has answered (stored), in order. */
  stored: string[] = [];
  lists = 0;
  beforePut?: (key: string) => Promise<void> | void;
  constructor(readonly inner: RepositoryBackend) {}
  get description() {
    return this.inner.description;
  }
  async put(key: string, body: Uint8Array | Readable) {
    this.puts++;
    await this.beforePut?.(key);
    await this.inner.put(key, body);
    this.stored.push(key);
  }
  putIfAbsent(key: string, body: Uint8Array) {
    return this.inner.putIfAbsent(key, body);
  }
  get(key: string) {
    if (key.startsWith(CHUNKS)) this.chunkGets++;
    return this.inner.get(key);
  }
  head(key: string) {
    return this.inner.head(key);
  }
  list(prefix: string) {
    this.lists++;
    return this.inner.list(prefix);
  }
  delete(key: string) {
    return this.inner.delete(key);
  }
  check() {
    return this.inner.check();
  }
}

export async function keys(b: RepositoryBackend, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const o of b.list(prefix)) out.push(o.key);
  return out.sort();
}

export const newCache = (maxBytes = 1024 * MiB) => new ChunkCache({ dir: fresh("cache"), maxBytes });

export interface Kind {
  name: string;
  /** A fresh, empty backend. */
  make(): RepositoryBackend;
}

/** An S3 server on loopback for this test file: started before its tests, stopped after. */
export function useS3(): () => TestS3 {
  let s3: TestS3 | undefined;
  before(async () => {
    s3 = await startS3();
  });
  after(async () => {
    await s3?.close();
  });
  return () => s3 as TestS3;
}

/** A key prefix of its own in the test bucket. */
export const s3Prefix = (name: string) => `t${++seq}/${name}`;
