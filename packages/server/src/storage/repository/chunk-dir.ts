import { open, readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { chunksOf } from "./cdc.js";
import { sha256 } from "./hash.js";
import type { LocalPiece } from "./local-chunks.js";
import { type ChunkRef, CommitError, type ManifestFile } from "./repository.js";

/** A folder cut into chunks and hashed: its manifest's files, and where each chunk is. */
export interface DirChunks {
  files: ManifestFile[];
  /** The first place each distinct chunk was found, by its sha256. */
  where: Map<string, LocalPiece>;
  bytes: number;
  chunks: number;
}

/**
 * Cuts every regular file of `srcDir` at content-defined points and hashes each chunk, without
 * touching any backend: what a commit uploads, and what a node offers its peers before that.
 * `onFirst` sees each distinct chunk's bytes once (a commit warms the node cache with them).
 */
export async function chunkDir(
  id: string,
  srcDir: string,
  onFirst?: (sha: string, data: Buffer) => Promise<unknown>,
): Promise<DirChunks> {
  const out: DirChunks = { files: [], where: new Map(), bytes: 0, chunks: 0 };
  for (const name of (await readdir(srcDir)).sort()) {
    const path = join(srcDir, name);
    if (!(await stat(path)).isFile()) throw new CommitError(id, `${path} is not a regular file`);
    const chunks: ChunkRef[] = [];
    let size = 0;
    const fh = await open(path, "r");
    try {
      for await (const data of chunksOf(fh)) {
        const n = data.length;
        const sha = sha256(data);
        chunks.push({ sha256: sha, size: n });
        if (!out.where.has(sha)) {
          out.where.set(sha, { file: path, offset: size, size: n });
          await onFirst?.(sha, data);
        }
        size += n;
      }
    } finally {
      await fh.close();
    }
    out.files.push({ name, size, chunks });
    out.bytes += size;
    out.chunks += chunks.length;
  }
  return out;
}
