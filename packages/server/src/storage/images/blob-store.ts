/**
 * Content-addressed blobs (layers, configs, manifests) at `<dir>/blobs/<alg>/<hex>`, shared by
 * every image. A blob only appears under its name after its digest was checked: writes go to
 * `<dir>/tmp/` and are renamed into place.
 */
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { renameDurable } from "../../util/durable-write.js";
import { ImagePullError } from "./errors.js";
import { isDigest } from "./reference.js";

function split(digest: string): [alg: string, hex: string] {
  if (!isDigest(digest)) throw new ImagePullError("unsupported", `unsupported digest ${digest}`);
  const i = digest.indexOf(":");
  return [digest.slice(0, i), digest.slice(i + 1)];
}

export function digestOf(bytes: Buffer, alg = "sha256"): string {
  return `${alg}:${createHash(alg).update(bytes).digest("hex")}`;
}

export class BlobStore {
  private readonly inflight = new Map<string, Promise<"cached" | "fetched">>();

  constructor(readonly dir: string) {}

  path(digest: string): string {
    const [alg, hex] = split(digest);
    return join(this.dir, "blobs", alg, hex);
  }

  /** Present, and of the expected size when one is given (a cheap check against truncation). */
  async has(digest: string, size?: number): Promise<boolean> {
    try {
      const s = await stat(this.path(digest));
      return s.isFile() && (size === undefined || s.size === size);
    } catch {
      return false;
    }
  }

  async read(digest: string): Promise<Buffer> {
    try {
      return await readFile(this.path(digest));
    } catch {
      throw new ImagePullError("blob-missing", `blob ${digest} is not in the image store ${this.dir}`);
    }
  }

  private async tempPath(): Promise<string> {
    const tmp = join(this.dir, "tmp");
    await mkdir(tmp, { recursive: true });
    return join(tmp, `${randomBytes(8).toString("hex")}.part`);
  }

  async putBuffer(digest: string, bytes: Buffer): Promise<void> {
    const [alg] = split(digest);
    const got = digestOf(bytes, alg);
    if (got !== digest) throw new ImagePullError("digest-mismatch", `digest mismatch: expected ${digest}, got ${got}`);
    if (await this.has(digest, bytes.length)) return;
    const tmp = await this.tempPath();
    await mkdir(join(this.dir, "blobs", alg), { recursive: true });
    try {
      await writeFile(tmp, bytes);
      await renameDurable(tmp, this.path(digest));
    } finally {
      await rm(tmp, { force: true });
    }
  }

  /**
   * Makes sure the blob is stored: returns "cached" without calling `open` when it already is,
   * else streams what `open` returns into a temp file, hashing as it goes, and renames it into
   * place only if digest and size match. Concurrent calls for one digest share one download.
   */
  ensure(
    digest: string,
    size: number | undefined,
    open: () => Promise<Readable>,
    onBytes?: (n: number) => void,
  ): Promise<"cached" | "fetched"> {
    const running = this.inflight.get(digest);
    if (running) return running;
    const p = this.fetch(digest, size, open, onBytes).finally(() => this.inflight.delete(digest));
    this.inflight.set(digest, p);
    return p;
  }

  private async fetch(
    digest: string,
    size: number | undefined,
    open: () => Promise<Readable>,
    onBytes?: (n: number) => void,
  ): Promise<"cached" | "fetched"> {
    if (await this.has(digest, size)) return "cached";
    const [alg] = split(digest);
    await mkdir(join(this.dir, "blobs", alg), { recursive: true });
    const tmp = await this.tempPath();
    const hash = createHash(alg);
    let n = 0;
    try {
      const src = await open();
      src.on("data", (chunk: Buffer) => {
        hash.update(chunk);
        n += chunk.length;
        if (size !== undefined && n > size)
          src.destroy(
            new ImagePullError("digest-mismatch", `blob ${digest} is larger than its descriptor's ${size} bytes`),
          );
        onBytes?.(n);
      });
      await pipeline(src, createWriteStream(tmp));
      const got = `${alg}:${hash.digest("hex")}`;
      if (got !== digest)
        throw new ImagePullError("digest-mismatch", `digest mismatch: blob ${digest} arrived as ${got}`);
      if (size !== undefined && n !== size) {
        throw new ImagePullError(
          "digest-mismatch",
          `size mismatch: blob ${digest} is ${n} bytes, descriptor says ${size}`,
        );
      }
      await renameDurable(tmp, this.path(digest));
      return "fetched";
    } finally {
      await rm(tmp, { force: true });
    }
  }
}
