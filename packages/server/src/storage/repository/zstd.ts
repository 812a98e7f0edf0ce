/**
 * zstd through Debian's `zstd` binary: Node 20's zlib has no zstd (it arrived in 22.15), and a
 * native addon would need a toolchain at install time. Starting a process costs 40-300 ms on
 * a busy 2-core host, far more than compressing a 1 MiB chunk, so commits and restores hand
 * over batches of chunks, one zstd run each, in zstd's multi-file mode (files in a tmpfs
 * folder); the semaphore keeps it to one run per core, and `nice` keeps commits running in
 * the background from slowing the sandboxes' own work.
 *
 * The runs are started by long-lived shells, not by this process: fork() of a server with a
 * few hundred MB resident blocks its event loop 20-40 ms per spawn (measured), which a
 * background commit paid once per batch, stalling API and proxy traffic.
 */
import { type ChildProcessByStdio, spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import type { Socket } from "node:net";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { Semaphore } from "../../util/concurrency.js";

const SLOTS = Math.max(2, availableParallelism());
const limit = new Semaphore(SLOTS);

export class ZstdError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ZstdError";
  }
}

type Shell = ChildProcessByStdio<Writable, Readable, null>;

/** A child's stdio pipes are sockets (the stream types do not say so). */
const pipes = (p: Shell) => [p.stdin, p.stdout] as unknown as Socket[];

/** One nice'd `sh` that runs command lines it is sent, one at a time, and reports exit codes. */
class Runner {
  private p: Shell | undefined;
  private pending: Array<{ resolve(code: number): void; reject(err: Error): void }> = [];
  private buf = "";

  private start(): Shell {
    const p = spawn("nice", ["-n", "10", "sh", "-c", 'while IFS= read -r l; do eval "$l"; echo "__rc $?"; done'], {
      stdio: ["pipe", "pipe", "ignore"],
    });
    p.stdout.setEncoding("utf8");
    p.stdout.on("data", (d: string) => {
      this.buf += d;
      for (let i = this.buf.indexOf("\n"); i >= 0; i = this.buf.indexOf("\n")) {
        const line = this.buf.slice(0, i);
        this.buf = this.buf.slice(i + 1);
        const m = /^__rc (\d+)$/.exec(line);
        if (m) this.pending.shift()?.resolve(Number(m[1]));
      }
      this.idle();
    });
    const fail = (err: Error) => {
      if (this.p !== p) return;
      this.p = undefined;
      this.buf = "";
      for (const w of this.pending.splice(0)) w.reject(err);
    };
    p.on("error", (e) => fail(new ZstdError(`cannot run zstd (install Debian's zstd): ${e.message}`, { cause: e })));
    p.on("close", (code) => fail(new ZstdError(`zstd runner exited (${code})`)));
    p.stdin.on("error", () => {});
    this.p = p;
    return p;
  }

  /** A runner waiting for nothing must not keep the process alive. */
  private idle(): void {
    if (!this.p || this.pending.length) return;
    this.p.unref();
    for (const s of pipes(this.p)) s.unref();
  }

  get busy(): boolean {
    return this.pending.length > 0;
  }

  run(line: string): Promise<number> {
    const p = this.p ?? this.start();
    p.ref();
    for (const s of pipes(p)) s.ref();
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      p.stdin.write(`${line}\n`);
    });
  }
}

// The semaphore lets at most SLOTS batches run at once, so one runner is always free.
const runners = Array.from({ length: SLOTS }, () => new Runner());

const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`;

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
 * Runs zstd once over many inputs (zstd's multi-file mode, files in a tmpfs folder). Outputs
 * come back in input order.
 */
async function batch(inputs: Uint8Array[], args: string[], inSuffix: string, outSuffix: string): Promise<Buffer[]> {
  return limit.run(async () => {
    const dir = await mkdtemp(join(scratchRoot, "aenv-zstd-"));
    try {
      const names = inputs.map((_, i) => `${i}${inSuffix}`);
      await Promise.all(inputs.map((b, i) => writeFile(join(dir, names[i] as string), b)));
      const runner = runners.find((r) => !r.busy) ?? (runners[0] as Runner);
      const line = `cd ${quote(dir)} && zstd ${[...args, "-q", "-f", "--", ...names].map(quote).join(" ")} 2>.err`;
      const code = await runner.run(line);
      if (code === 127) throw new ZstdError("cannot run zstd (install Debian's zstd)");
      if (code !== 0) {
        const why = (await readFile(join(dir, ".err"), "utf8").catch(() => "")).trim().split("\n")[0];
        throw new ZstdError(`zstd ${args.join(" ")} exited ${code}${why ? `: ${why}` : ""}`);
      }
      return await Promise.all(inputs.map((_, i) => readFile(join(dir, `${i}${outSuffix}`))));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
}

export async function compress(data: Uint8Array, level = 3): Promise<Buffer> {
  return (await batch([data], [`-${level}`, "--no-check"], "", ".zst"))[0] as Buffer;
}

export async function decompress(data: Uint8Array): Promise<Buffer> {
  return (await batch([data], ["-d"], ".zst", ""))[0] as Buffer;
}

/** Compresses up to MAX_BATCH inputs with one zstd run. */
export function compressMany(inputs: Uint8Array[], level = 3): Promise<Buffer[]> {
  return batch(inputs, [`-${level}`, "--no-check"], "", ".zst");
}

/**
 * Decompresses many frames with one zstd run; each result is a Buffer or, when that input
 * (or the batch) failed, the error of decompressing it alone.
 */
export async function decompressMany(inputs: Uint8Array[]): Promise<Array<Buffer | Error>> {
  try {
    if (inputs.length > 1) return await batch(inputs, ["-d"], ".zst", "");
  } catch {
    // One bad frame fails the batch: find which, one run each.
  }
  return Promise.all(inputs.map((z) => decompress(z).catch((e: unknown) => e as Error)));
}

/** Fails with one line when the binary is missing (checked at start by openRepository). */
export async function checkZstd(): Promise<void> {
  const round = await decompress(await compress(Buffer.from("aenv")));
  if (round.toString() !== "aenv") throw new ZstdError("zstd round trip returned different bytes");
}
