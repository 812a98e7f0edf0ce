import { open } from "node:fs/promises";
import { readFully } from "../../util/read-fully.js";
import type { Manifest } from "./repository.js";

/** Where a chunk's bytes are in a file of this node. */
export interface LocalPiece {
  file: string;
  offset: number;
  size: number;
}

/**
 * The chunks of manifests this node committed or restored, where they still are on its disk
 * (a snapshot's image, a pause image, a restored copy), so peers can be sent them without a
 * second copy in the chunk cache. Memory only (about a hundred bytes a chunk of ~1 MiB): after
 * a restart a peer asking for one gets "not held" and reads the repository. A file that has
 * gone or changed since is the asker's problem to notice, and it does: it checks every digest.
 */
export class LocalChunks {
  private readonly pieces = new Map<string, { piece: LocalPiece; id: string }>();
  private readonly byManifest = new Map<string, string[]>();

  /** @param maxChunks bound on what is remembered; the oldest manifests are forgotten first. */
  constructor(private readonly maxChunks = 1_000_000) {}

  get size(): number {
    return this.pieces.size;
  }

  add(id: string, pieces: Iterable<readonly [string, LocalPiece]>): void {
    this.forget(id);
    const shas: string[] = [];
    for (const [sha, piece] of pieces) {
      this.pieces.set(sha, { piece, id });
      shas.push(sha);
    }
    this.byManifest.set(id, shas);
    for (const old of this.byManifest.keys()) {
      if (this.pieces.size <= this.maxChunks || old === id) break;
      this.forget(old);
    }
  }

  /** A manifest's files as they were written into `dir` (materialize), chunk by chunk. */
  addManifest(m: Manifest, dir: string): void {
    const out: Array<[string, LocalPiece]> = [];
    for (const f of m.files) {
      let offset = 0;
      for (const c of f.chunks) {
        out.push([c.sha256, { file: `${dir}/${f.name}`, offset, size: c.size }]);
        offset += c.size;
      }
    }
    this.add(m.id, out);
  }

  forget(id: string): void {
    for (const sha of this.byManifest.get(id) ?? []) {
      if (this.pieces.get(sha)?.id === id) this.pieces.delete(sha);
    }
    this.byManifest.delete(id);
  }

  /** The bytes where the chunk was, or undefined when its file is gone or shorter now. */
  async read(sha: string): Promise<Buffer | undefined> {
    const e = this.pieces.get(sha);
    if (!e) return undefined;
    const fh = await open(e.piece.file, "r").catch(() => undefined);
    if (!fh) return undefined;
    try {
      const buf = Buffer.alloc(e.piece.size);
      return (await readFully(fh, buf, buf.length, e.piece.offset)) === buf.length ? buf : undefined;
    } finally {
      await fh.close();
    }
  }
}
