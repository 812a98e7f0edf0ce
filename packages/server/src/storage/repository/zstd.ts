/**
 * zstd through Debian's `zstd` binary: Node 20's zlib has no zstd (it arrived in 22.15), and a
 * native addon would need a toolchain at install time. Starting a process costs 40-300 ms on
 * a busy 2-core host, far more than compressing a 1 MiB chunk, so commits and restores hand
 * over batches of chunks, one process each, in zstd's multi-file mode (files in a tmpfs
 * folder); the semaphore keeps it to one process per core, and `nice` keeps commits running
 * in the background from slowing the sandboxes' own work.
 */
import { spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { Semaphore } from "./concurrency.js";

const limit = new Semaphore(Math.max(2, availableParallelism()));

export class ZstdError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ZstdError";
  }
}

function run(args: string[], input: Uint8Array): Promise<Buffer> {
  return limit.run(
    () =>
      new Promise<Buffer>((resolve, reject) => {
        const p = spawn("nice", ["-n", "10", "zstd", ...args], { stdio: ["pipe", "pipe", "pipe"] });
        const out: Buffer[] = [];
        const err: Buffer[] = [];
        p.stdout.on("data", (b: Buffer) => out.push(b));
        p.stderr.on("data", (b: Buffer) => err.push(b));
        p.on("error", (e) =>
          reject(new ZstdError(`cannot run zstd (install Debian's zstd): ${e.message}`, { cause: e })),
        );
        // EPIPE when zstd exits early on bad input; the exit code below reports it.
        p.stdin.on("error", () => {});
        p.on("close", (code) => {
          if (code === 0) resolve(Buffer.concat(out));
          else reject(new ZstdError(`zstd ${args.join(" ")} exited ${code}: ${Buffer.concat(err).toString().trim()}`));
        });
        p.stdin.end(input);
      }),
  );
}

/** Largest batch: 32 chunks of ≤ 4 MiB each in the temp folder at once. */
export const MAX_BATCH = 32;

const scratchRoot = (() => {
  try {
    accessSync("/dev/shm", constants.W_OK);
    return "/dev/shm";
  } catch {
    return tmpdir();
  }
})();

/**
 * Runs one zstd process over many inputs (zstd's multi-file mode, files in a tmpfs folder).
 * Outputs come back in input order.
 */
async function batch(inputs: Uint8Array[], args: string[], inSuffix: string, outSuffix: string): Promise<Buffer[]> {
  return limit.run(async () => {
    const dir = await mkdtemp(join(scratchRoot, "aenv-zstd-"));
    try {
      const names = inputs.map((_, i) => `${i}${inSuffix}`);
      await Promise.all(inputs.map((b, i) => writeFile(join(dir, names[i] as string), b)));
      await new Promise<void>((resolve, reject) => {
        const p = spawn("nice", ["-n", "10", "zstd", ...args, "-q", "-f", "--", ...names], {
          cwd: dir,
          stdio: "ignore",
        });
        p.on("error", (e) => reject(new ZstdError(`cannot run zstd (install Debian's zstd): ${e.message}`)));
        p.on("close", (code) => (code === 0 ? resolve() : reject(new ZstdError(`zstd batch exited ${code}`))));
      });
      return await Promise.all(inputs.map((_, i) => readFile(join(dir, `${i}${outSuffix}`))));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
}

export function compress(data: Uint8Array, level = 3): Promise<Buffer> {
  return run([`-${level}`, "-q", "-c", "--no-check"], data);
}

export function decompress(data: Uint8Array): Promise<Buffer> {
  return run(["-d", "-q", "-c"], data);
}

/** Compresses up to MAX_BATCH inputs with one process. */
export function compressMany(inputs: Uint8Array[], level = 3): Promise<Buffer[]> {
  if (inputs.length === 1) return Promise.all([compress(inputs[0] as Uint8Array, level)]);
  return batch(inputs, [`-${level}`, "--no-check"], "", ".zst");
}

/**
 * Decompresses many frames with one process; each result is a Buffer or, when that input
 * (or the batch) failed, the error of decompressing it alone.
 */
export async function decompressMany(inputs: Uint8Array[]): Promise<Array<Buffer | Error>> {
  try {
    if (inputs.length > 1) return await batch(inputs, ["-d"], ".zst", "");
  } catch {
    // One bad frame fails the batch: find which, one process each.
  }
  return Promise.all(inputs.map((z) => decompress(z).catch((e: unknown) => e as Error)));
}

/** Fails with one line when the binary is missing (checked at start by openRepository). */
export async function checkZstd(): Promise<void> {
  const round = await decompress(await compress(Buffer.from("aenv")));
  if (round.toString() !== "aenv") throw new ZstdError("zstd round trip returned different bytes");
}
