import type { FileHandle } from "node:fs/promises";

/**
 * Reads `len` bytes at `pos` (or the current position, with null) into `buf`, however the
 * reads happen to split; returns how many there were (fewer only at the end of the file).
 */
export async function readFully(fh: FileHandle, buf: Buffer, len: number, pos: number | null): Promise<number> {
  let filled = 0;
  while (filled < len) {
    const { bytesRead } = await fh.read(buf, filled, len - filled, pos === null ? null : pos + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return filled;
}
