import { createHash } from "node:crypto";
import type { FileHandle } from "node:fs/promises";

/**
 * Content-defined chunking (a gear rolling hash, as in FastCDC): cut points depend on the bytes
 * around them, not on offsets. runsc checkpoint images move data around between captures of
 * the same sandbox (its memory file is written range by range, so one page allocated or freed
 * shifts everything after it); fixed-size chunks then share nothing, while content-defined
 * ones find the unchanged runs again wherever they moved.
 */
export const CDC_MIN = 256 * 1024;
/** Average chunk size is 2^CDC_AVG_BITS (1 MiB). */
export const CDC_AVG_BITS = 20;
export const CDC_MAX = 4 * 1024 * 1024;

// The top bits of the gear hash depend on the last 32 bytes (the low ones on fewer): cut on them.
const SHIFT = 32 - CDC_AVG_BITS;
const READ = 8 * 1024 * 1024;

/** Fixed pseudo-random table: changing it changes every cut point (dedup with old chunks only). */
const GEAR = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) t[i] = createHash("sha256").update(`aenv-gear-${i}`).digest().readUInt32LE(0);
  return t;
})();

/** Length of the next chunk at the start of `b` (b holds at least CDC_MAX bytes unless at EOF). */
export function nextCut(b: Uint8Array): number {
  if (b.length <= CDC_MIN) return b.length;
  const end = Math.min(b.length, CDC_MAX);
  let h = 0;
  for (let i = CDC_MIN; i < end; i++) {
    h = ((h << 1) + (GEAR[b[i] as number] as number)) >>> 0;
    if (h >>> SHIFT === 0) return i + 1;
  }
  return end;
}

/** Yields a file's content-defined chunks in order (copies: callers may keep them). */
export async function* chunksOf(fh: FileHandle): AsyncGenerator<Buffer> {
  let pending = Buffer.alloc(0);
  let eof = false;
  const block = Buffer.allocUnsafe(READ);
  for (;;) {
    while (!eof && pending.length < CDC_MAX) {
      const { bytesRead } = await fh.read(block, 0, READ, null);
      if (bytesRead === 0) eof = true;
      else pending = Buffer.concat([pending, block.subarray(0, bytesRead)]);
    }
    if (pending.length === 0) return;
    const cut = nextCut(pending);
    yield Buffer.from(pending.subarray(0, cut));
    pending = pending.subarray(cut);
    // Cutting and hashing are synchronous: one turn of the event loop per chunk, not the up to
    // eight chunks of one read in a row, so a background commit leaves room for API traffic.
    await new Promise<void>((res) => setImmediate(res));
  }
}
