import { createHash, randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { mkdir, open, readdir, readFile, rename, rm, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import {
  type ChunkRef,
  type CommitStats,
  CorruptChunkError,
  type Manifest,
  type ManifestFile,
  type SnapshotRepository,
} from "./repository.js";

const CHUNK_BYTES = 4 * 1024 * 1024;
const ID_RE = /^[A-Za-z0-9_.-]{1,128}$/;

async function fsyncPath(path: string, flags = constants.O_RDONLY): Promise<void> {
  const fh = await open(path, flags);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Writes bytes to path atomically and durably: temp name, fsync, rename, fsync the folder. */
async function writeDurably(dir: string, name: string, data: Uint8Array): Promise<void> {
  const tmp = join(dir, `.${name}.tmp-${randomBytes(4).toString("hex")}`);
  const fh = await open(tmp, "w", 0o644);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, join(dir, name));
  await fsyncPath(dir);
}

/**
 * posix_fs backend:
 *   ROOT/chunks/<aa>/<sha256>     content-addressed chunk (up to 4 MiB), immutable
 *   ROOT/manifests/<id>.json      manifest, written after all its chunks
 */
export class PosixFsRepository implements SnapshotRepository {
  constructor(private readonly root: string) {}

  private chunkDir(sha: string): string {
    return join(this.root, "chunks", sha.slice(0, 2));
  }

  private manifestPath(id: string): string {
    if (!ID_RE.test(id)) throw new Error(`invalid snapshot id '${id}'`);
    return join(this.root, "manifests", `${id}.json`);
  }

  private async putChunk(data: Buffer): Promise<{ ref: ChunkRef; reused: boolean }> {
    const sha = createHash("sha256").update(data).digest("hex");
    const dir = this.chunkDir(sha);
    const ref = { sha256: sha, size: data.length };
    try {
      const st = await stat(join(dir, sha));
      if (st.size === data.length) return { ref, reused: true };
    } catch {
      // not stored yet
    }
    await mkdir(dir, { recursive: true });
    await writeDurably(dir, sha, data);
    return { ref, reused: false };
  }

  async commit(id: string, srcDir: string, meta: Record<string, unknown>) {
    this.manifestPath(id); // validates the id before anything is written
    const stats: CommitStats = { bytes: 0, chunks: 0, reused: 0 };
    const files: ManifestFile[] = [];
    for (const name of (await readdir(srcDir)).sort()) {
      const fh = await open(join(srcDir, name), "r");
      const chunks: ChunkRef[] = [];
      let size = 0;
      try {
        const buf = Buffer.allocUnsafe(CHUNK_BYTES);
        for (;;) {
          // Fill a whole chunk so chunk boundaries do not depend on read sizes.
          let filled = 0;
          while (filled < CHUNK_BYTES) {
            const { bytesRead } = await fh.read(buf, filled, CHUNK_BYTES - filled, null);
            if (bytesRead === 0) break;
            filled += bytesRead;
          }
          if (filled === 0) break;
          const { ref, reused } = await this.putChunk(Buffer.from(buf.subarray(0, filled)));
          chunks.push(ref);
          size += filled;
          stats.chunks++;
          stats.bytes += filled;
          if (reused) stats.reused++;
          if (filled < CHUNK_BYTES) break;
        }
      } finally {
        await fh.close();
      }
      files.push({ name, size, chunks });
    }
    const manifest: Manifest = { version: 1, id, createdAt: new Date().toISOString(), files, meta };
    const mdir = join(this.root, "manifests");
    await mkdir(mdir, { recursive: true });
    await writeDurably(mdir, `${id}.json`, Buffer.from(JSON.stringify(manifest)));
    return { manifest, stats };
  }

  async get(id: string): Promise<Manifest | undefined> {
    try {
      return JSON.parse(await readFile(this.manifestPath(id), "utf8")) as Manifest;
    } catch {
      return undefined;
    }
  }

  async list(): Promise<Manifest[]> {
    let names: string[] = [];
    try {
      names = await readdir(join(this.root, "manifests"));
    } catch {
      return [];
    }
    const out: Manifest[] = [];
    for (const n of names) {
      if (!n.endsWith(".json") || n.startsWith(".")) continue;
      const m = await this.get(n.slice(0, -5));
      if (m) out.push(m);
    }
    return out;
  }

  async materialize(id: string, destDir: string): Promise<void> {
    const m = await this.get(id);
    if (!m) throw new Error(`snapshot '${id}' not in the repository`);
    await mkdir(destDir, { recursive: true });
    for (const f of m.files) {
      const fh = await open(join(destDir, f.name), "w", 0o644);
      try {
        for (const c of f.chunks) {
          const data = await readFile(join(this.chunkDir(c.sha256), c.sha256));
          const sha = createHash("sha256").update(data).digest("hex");
          if (sha !== c.sha256 || data.length !== c.size) {
            throw new CorruptChunkError(`chunk ${c.sha256} of snapshot '${id}' is corrupt`);
          }
          await fh.write(data);
        }
        await fh.sync();
      } finally {
        await fh.close();
      }
    }
  }

  async delete(id: string): Promise<void> {
    const m = await this.get(id);
    if (!m) return;
    await unlink(this.manifestPath(id));
    await fsyncPath(join(this.root, "manifests"));
    await this.gc(m);
  }

  /** Removes the chunks of a deleted manifest that no remaining manifest references. */
  private async gc(deleted: Manifest): Promise<void> {
    const live = new Set<string>();
    for (const m of await this.list()) for (const f of m.files) for (const c of f.chunks) live.add(c.sha256);
    for (const f of deleted.files) {
      for (const c of f.chunks) {
        if (!live.has(c.sha256)) await rm(join(this.chunkDir(c.sha256), c.sha256), { force: true });
      }
    }
  }
}
