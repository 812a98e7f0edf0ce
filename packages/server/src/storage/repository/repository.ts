/**
 * The snapshot repository seam: content-addressed chunks plus one manifest per snapshot,
 * written last. posix_fs is the local backend; an S3 backend keeps the same layout in a bucket.
 */
export interface ChunkRef {
  /** sha256 of the chunk's bytes, hex. */
  sha256: string;
  size: number;
}

export interface ManifestFile {
  name: string;
  size: number;
  chunks: ChunkRef[];
}

export interface Manifest {
  version: 1;
  id: string;
  createdAt: string;
  files: ManifestFile[];
  /** Whatever the orchestrator needs to restore it (sizing, rootfs, runtime, token…). */
  meta: Record<string, unknown>;
}

export interface CommitStats {
  bytes: number;
  chunks: number;
  /** Chunks that were already stored (deduplicated). */
  reused: number;
}

export interface SnapshotRepository {
  /** Stores every file of srcDir as chunks, then the manifest; visible only once complete. */
  commit(
    id: string,
    srcDir: string,
    meta: Record<string, unknown>,
  ): Promise<{ manifest: Manifest; stats: CommitStats }>;
  /** Rebuilds the files of a snapshot into destDir, verifying every chunk's digest. */
  materialize(id: string, destDir: string): Promise<void>;
  get(id: string): Promise<Manifest | undefined>;
  list(): Promise<Manifest[]>;
  /** Removes the manifest, then every chunk no other manifest references. */
  delete(id: string): Promise<void>;
}

export class CorruptChunkError extends Error {}
