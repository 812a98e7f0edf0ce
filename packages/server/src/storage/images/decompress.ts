/** Opens a stored layer blob as a stream of tar bytes: gzip via node:zlib, zstd via the `zstd` binary. */
import { spawn } from "node:child_process";
import { createReadStream } from "node:fs";
import { open } from "node:fs/promises";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { ImagePullError } from "./errors.js";

export type Compression = "gzip" | "zstd" | "none";

/** By magic bytes rather than media type: archives and mislabelled layers exist. */
export async function sniffCompression(path: string): Promise<Compression> {
  const fh = await open(path, "r");
  try {
    const b = Buffer.alloc(4);
    const { bytesRead } = await fh.read(b, 0, 4, 0);
    if (bytesRead >= 2 && b[0] === 0x1f && b[1] === 0x8b) return "gzip";
    if (bytesRead === 4 && b.readUInt32LE(0) === 0xfd2fb528) return "zstd";
    return "none";
  } finally {
    await fh.close();
  }
}

/**
 * Streams the decompressed content of `path`. `onRead` sees compressed bytes as they are read
 * (for progress). Breaking out of the iteration stops the decompressor.
 */
export async function* decompressFile(path: string, onRead?: (bytes: number) => void): AsyncGenerator<Buffer> {
  const kind = await sniffCompression(path);
  const file = createReadStream(path, { highWaterMark: 256 * 1024 });
  let n = 0;
  file.on("data", (c) => {
    n += c.length;
    onRead?.(n);
  });
  if (kind === "none") {
    yield* file as AsyncIterable<Buffer>;
    return;
  }
  if (kind === "gzip") {
    const gunzip = createGunzip({ chunkSize: 256 * 1024 });
    const piping = pipeline(file, gunzip).catch(() => {}); // errors surface through gunzip's iteration
    try {
      yield* gunzip as AsyncIterable<Buffer>;
    } catch (e) {
      throw new ImagePullError("bad-layer", `gzip: ${(e as Error).message}`, { cause: e });
    } finally {
      gunzip.destroy();
      await piping;
    }
    return;
  }
  const child = spawn("zstd", ["-dc", "-q"], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => {
    if (stderr.length < 2000) stderr += d.toString();
  });
  const exit = new Promise<{ code: number | null; err?: Error }>((res) => {
    child.once("error", (err) => res({ code: null, err }));
    child.once("close", (code) => res({ code }));
  });
  const feeding = pipeline(file, child.stdin).catch(() => {}); // EPIPE when zstd stops early is reported by its exit
  try {
    yield* child.stdout as AsyncIterable<Buffer>;
    const { code, err } = await exit;
    if (err)
      throw new ImagePullError("bad-layer", `cannot run zstd (apt install zstd): ${err.message}`, { cause: err });
    if (code !== 0) throw new ImagePullError("bad-layer", `zstd failed (exit ${code}): ${stderr.trim()}`);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill();
    file.destroy();
    await feeding;
  }
}
