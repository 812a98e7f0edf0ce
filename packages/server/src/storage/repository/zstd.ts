/**
 * zstd through Debian's `zstd` binary: Node 20's zlib has no zstd (it arrived in 22.15), and a
 * native addon would need a toolchain at install time. One process per ≤4 MiB chunk costs a
 * few ms, small beside hashing and I/O; the semaphore keeps it to one process per core.
 */
import { spawn } from "node:child_process";
import { availableParallelism } from "node:os";
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
        const p = spawn("zstd", args, { stdio: ["pipe", "pipe", "pipe"] });
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

export function compress(data: Uint8Array, level = 3): Promise<Buffer> {
  return run([`-${level}`, "-q", "-c", "--no-check"], data);
}

export function decompress(data: Uint8Array): Promise<Buffer> {
  return run(["-d", "-q", "-c"], data);
}

/** Fails with one line when the binary is missing (checked at start by openRepository). */
export async function checkZstd(): Promise<void> {
  const round = await decompress(await compress(Buffer.from("aenv")));
  if (round.toString() !== "aenv") throw new ZstdError("zstd round trip returned different bytes");
}
