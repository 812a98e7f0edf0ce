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
import { lstat, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import type { Socket } from "node:net";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { Semaphore } from "../../util/concurrency.js";
import { isAlive, SELF } from "../../util/process-identity.js";

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

const SCRATCH_PREFIX = "aenv-zstd-";
/**
 * Scratch folders are named for their process (PID namespace, PID, start time): a server
 * killed mid-batch leaves its folder, in RAM on /dev/shm, and the next one can tell it from a
 * live process's (sweepScratch).
 */
const SCRATCH_OWN = `${SCRATCH_PREFIX}${SELF.ns ?? 0}-${SELF.pid}-${SELF.start ?? 0}-`;
const SCRATCH_NAME = /^aenv-zstd-(\d+)-(\d+)-(\d+)-[^-]+$/;
/** No batch (≤ MAX_BATCH chunks) runs this long without touching its folder. */
const SCRATCH_ABANDONED_MS = 3_600_000;

/**
 * Runs zstd once over many inputs (zstd's multi-file mode, files in a tmpfs folder). Outputs
 * come back in input order.
 */
async function batch(inputs: Uint8Array[], args: string[], inSuffix: string, outSuffix: string): Promise<Buffer[]> {
  return limit.run(async () => {
    const dir = await mkdtemp(join(scratchRoot, SCRATCH_OWN));
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

/** A stored chunk and the size the manifest gives its bytes. */
export interface SizedFrame {
  frame: Uint8Array;
  size: number;
}

const FCS_BYTES = [0, 2, 4, 8] as const;
const DICT_ID_BYTES = [0, 1, 2, 4] as const;

/**
 * Why `z` is not one zstd frame declaring `size` content bytes, or undefined when it is.
 * Checked before zstd runs because zstd writes what it decompresses to a tmpfs folder (host
 * memory) before anything here can look at it: a few KiB of RLE blocks expand to gigabytes,
 * and whoever can write the repository can plant them. zstd itself stops a frame at its
 * declared content size ("destination buffer is too small"), so a frame that declares it,
 * with nothing after the frame (zstd decodes concatenated frames one after another), can
 * produce at most `size` bytes. Chunks written by `compress` always declare it (zstd records
 * a file's size).
 */
export function frameProblem(z: Uint8Array, size: number): string | undefined {
  if (z.length < 6 || z[0] !== 0x28 || z[1] !== 0xb5 || z[2] !== 0x2f || z[3] !== 0xfd) return "not a zstd frame";
  const fhd = z[4] as number;
  if (fhd & 0x08) return "a reserved frame header bit is set";
  const single = (fhd >> 5) & 1;
  const fcsFlag = fhd >> 6;
  const fcsLen = fcsFlag === 0 ? single : (FCS_BYTES[fcsFlag] as number);
  if (fcsLen === 0) return "the frame declares no content size";
  let pos = 5 + (single ? 0 : 1) + (DICT_ID_BYTES[fhd & 3] as number);
  if (pos + fcsLen > z.length) return "the frame is truncated";
  let declared = 0;
  for (let i = fcsLen - 1; i >= 0; i--) declared = declared * 256 + (z[pos + i] as number);
  if (fcsLen === 2) declared += 256;
  pos += fcsLen;
  if (declared !== size) return `the frame declares ${declared} bytes, the manifest ${size}`;
  for (;;) {
    if (pos + 3 > z.length) return "the frame is truncated";
    const h = (z[pos] as number) | ((z[pos + 1] as number) << 8) | ((z[pos + 2] as number) << 16);
    const type = (h >> 1) & 3;
    if (type === 3) return "a reserved block type";
    pos += 3 + (type === 1 ? 1 : h >>> 3);
    if (h & 1) break;
  }
  if ((fhd >> 2) & 1) pos += 4;
  if (pos > z.length) return "the frame is truncated";
  if (pos < z.length) return `${z.length - pos} bytes follow after its frame`;
  return undefined;
}

/**
 * Decompresses many chunks with one zstd run; each result is a Buffer or, when that input
 * (or the batch) failed, the error of decompressing it alone. A frame `frameProblem` refuses
 * never reaches zstd.
 */
export async function decompressMany(inputs: SizedFrame[]): Promise<Array<Buffer | Error>> {
  const out: Array<Buffer | Error | undefined> = inputs.map(({ frame, size }) => {
    const why = frameProblem(frame, size);
    return why === undefined ? undefined : new ZstdError(`refused before decompressing: ${why}`);
  });
  const todo = inputs.flatMap((x, i) => (out[i] === undefined ? [{ ...x, i }] : []));
  let done: Array<Buffer | Error> | undefined;
  try {
    if (todo.length > 1)
      done = await batch(
        todo.map((t) => t.frame),
        ["-d"],
        ".zst",
        "",
      );
  } catch {
    // One bad frame fails the batch: find which, one run each.
  }
  done ??= await Promise.all(todo.map((t) => decompress(t.frame).catch((e: unknown) => e as Error)));
  for (const [k, t] of todo.entries()) out[t.i] = done[k] as Buffer | Error;
  return out as Array<Buffer | Error>;
}

/**
 * Removes scratch folders whose process is gone: in this PID namespace, one whose PID is not
 * alive or belongs to a process started at another time (a reused PID); one of another PID
 * namespace (whose PIDs mean nothing here) or of the older unnamed layout only once untouched
 * for an hour. /dev/shm is writable by every local user: only real folders owned by this
 * user are touched (a recursive removal of a tree someone else can write is a symlink race).
 * Meant to run once, at server start. Returns how many went.
 */
export async function sweepScratch(root = scratchRoot, now = Date.now()): Promise<number> {
  const uid = process.geteuid?.() ?? -1;
  let removed = 0;
  for (const name of await readdir(root).catch(() => [] as string[])) {
    if (!name.startsWith(SCRATCH_PREFIX) || name.startsWith(SCRATCH_OWN)) continue;
    const path = join(root, name);
    const st = await lstat(path).catch(() => undefined);
    if (!st?.isDirectory() || st.uid !== uid) continue;
    const m = SCRATCH_NAME.exec(name);
    const gone =
      m && m[1] === SELF.ns
        ? !isAlive({ pid: Number(m[2]), ...(m[3] !== "0" ? { start: m[3] } : {}) })
        : now - st.mtimeMs > SCRATCH_ABANDONED_MS;
    if (!gone) continue;
    await rm(path, { recursive: true, force: true }).catch(() => undefined);
    removed++;
  }
  return removed;
}

/** Fails with one line when the binary is missing (checked at start by openRepository). */
export async function checkZstd(): Promise<void> {
  const round = await decompress(await compress(Buffer.from("aenv")));
  if (round.toString() !== "aenv") throw new ZstdError("zstd round trip returned different bytes");
}
