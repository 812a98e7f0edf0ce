/**
 * The snapshot repository seam: content-addressed chunks plus one manifest per snapshot,
 * written last. ChunkRepository (chunk-repository.ts) implements it over any
 * RepositoryBackend (posix_fs folder or S3 bucket, same layout).
 */
export interface ChunkRef {
  /** sha256 of the chunk's uncompressed bytes, hex. */
  sha256: string;
  /** Uncompressed size. */
  size: number;
}

/** A node that may hold a manifest's chunks in its cache. */
export interface ChunkHolder {
  name: string;
  /** The chunk's uncompressed bytes as that node has them; rejects when it does not. */
  get(sha256: string, size: number): Promise<Buffer>;
}

export interface ManifestFile {
  name: string;
  size: number;
  chunks: ChunkRef[];
}

export interface Manifest {
  /** 2: chunks are zstd frames under chunks/<aa>/<sha256>.zst. */
  version: 2;
  id: string;
  createdAt: string;
  /** Largest chunk: files are cut at content-defined points (storage/repository/cdc.ts). */
  chunkSize: number;
  compression: "zstd";
  files: ManifestFile[];
  /** What it is and what a restore needs; read through manifest-kinds.ts, opaque here. */
  meta: Record<string, unknown>;
}

export interface CommitStats {
  /** Uncompressed bytes of all files. */
  bytes: number;
  /** Chunk references in the manifest. */
  chunks: number;
  /** References that needed no upload: already stored, or repeated within this commit. */
  reused: number;
  /** Chunks this commit wrote to the backend, and their compressed bytes. */
  uploadedChunks: number;
  uploadedBytes: number;
  durationMs: number;
}

export interface Announcement {
  id: string;
  names: string[];
  /** When it was announced (ms since the epoch). */
  at: number;
}

export interface SnapshotRepository {
  /** Stores every file of srcDir as chunks, then the manifest; visible only once complete. */
  commit(id: string, srcDir: string, meta: object): Promise<{ manifest: Manifest; stats: CommitStats }>;
  /**
   * Rebuilds the files of a snapshot into destDir (which must not exist, or be empty),
   * verifying every chunk's digest. On failure destDir is left as it was.
   */
  materialize(id: string, destDir: string): Promise<void>;
  get(id: string): Promise<Manifest | undefined>;
  list(): Promise<Manifest[]>;
  /**
   * A listing started no earlier than this call, shared by concurrent callers: a name that
   * misses locally is never answered from a listing older than the request.
   */
  listFresh(): Promise<Manifest[]>;
  /** Keeps a manifest's chunks in the node cache (a paused sandbox resumes without a fetch). */
  pinManifest(m: Manifest): void;
  unpin(id: string): void;
  /**
   * Says a commit of `id` is coming (a snapshot just taken): another server that misses the
   * name waits for the manifest instead of answering 404. Withdrawn when the commit ends.
   */
  announce(id: string, names: string[]): Promise<void>;
  withdraw(id: string): Promise<void>;
  /** Commits announced and not withdrawn, newer than `maxAgeMs`. */
  announced(maxAgeMs?: number): Promise<Announcement[]>;
  /** The manifest once it exists, polling until `timeoutMs`; undefined after that. */
  waitFor(id: string, timeoutMs: number): Promise<Manifest | undefined>;
  /** Create-if-absent marker (see claims.ts): true when `holder` has (or already had) it. */
  claim(name: string, holder: string): Promise<boolean>;
  /** The holder of a claim, if anyone made it. */
  claimHolder(name: string): Promise<string | undefined>;
  /** Removes the manifest, then (by default) every chunk of it no other manifest references. */
  delete(id: string): Promise<void>;
  /**
   * The sealed manifest a commit of srcDir would store, built without the backend, its chunks
   * served to peers from srcDir under `localId` until forgetOffer (cluster.p2p).
   */
  offer(id: string, srcDir: string, meta: object, localId: string): Promise<Buffer>;
  forgetOffer(localId: string): void;
  /** A sealed manifest a peer sent, checked as one read from the repository. */
  openOffered(id: string, raw: Buffer): Manifest;
  /** As materialize, from a manifest given; `holders` asked for its chunks first. */
  materializeFrom(m: Manifest, destDir: string, holders?: ChunkHolder[]): Promise<void>;
}

/** A chunk's bytes do not match its digest (or do not decompress). Names snapshot and chunk. */
export class CorruptChunkError extends Error {
  constructor(
    readonly snapshotId: string,
    readonly digest: string,
    detail: string,
  ) {
    super(`snapshot '${snapshotId}': chunk ${digest} is corrupt (${detail})`);
    this.name = "CorruptChunkError";
  }
}

/** A chunk a manifest references is not in the backend. Names snapshot and chunk. */
export class MissingChunkError extends Error {
  constructor(
    readonly snapshotId: string,
    readonly digest: string,
    where: string,
  ) {
    super(`snapshot '${snapshotId}': chunk ${digest} is missing from ${where}`);
    this.name = "MissingChunkError";
  }
}

export class SnapshotNotFoundError extends Error {
  constructor(readonly snapshotId: string) {
    super(`snapshot '${snapshotId}' not in the repository`);
    this.name = "SnapshotNotFoundError";
  }
}

/** A commit failed; nothing of it is visible (no manifest). The message says why. */
export class CommitError extends Error {
  constructor(
    readonly snapshotId: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`commit of '${snapshotId}' failed: ${message}`, options);
    this.name = "CommitError";
  }
}
