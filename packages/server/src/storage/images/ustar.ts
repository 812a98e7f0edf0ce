/**
 * The tar header block: where each field sits, the type flags, the checksum and pax records.
 * One definition for the reader here (tar.ts) and every tar the tests write, so a field
 * moved or a flag added cannot make the two disagree.
 */

export const BLOCK = 512;

/** [offset, length] of each field in a header block (POSIX ustar). */
export const FIELD = {
  name: [0, 100],
  mode: [100, 8],
  uid: [108, 8],
  gid: [116, 8],
  size: [124, 12],
  mtime: [136, 12],
  checksum: [148, 8],
  typeflag: [156, 1],
  linkname: [157, 100],
  magic: [257, 6],
  version: [263, 2],
  prefix: [345, 155],
} as const satisfies Record<string, readonly [number, number]>;

/** The magic of a POSIX ustar header (its prefix field is then part of the name). */
export const USTAR_MAGIC = "ustar\0";

export type TarEntryType = "file" | "hardlink" | "symlink" | "char" | "block" | "dir" | "fifo" | "other";

/** The flag each entry type is written with. */
export const TYPEFLAG = {
  file: "0",
  hardlink: "1",
  symlink: "2",
  char: "3",
  block: "4",
  dir: "5",
  fifo: "6",
} as const satisfies Record<Exclude<TarEntryType, "other">, string>;

/** Flags of records that describe the next entry (pax, global pax, GNU long name and link). */
export const EXTENSION_FLAGS = { pax: "x", globalPax: "g", longName: "L", longLink: "K" } as const;

/** The sum the checksum field holds: every byte, the checksum field itself counted as spaces. */
export function headerChecksum(h: Buffer): number {
  const [at, len] = FIELD.checksum;
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= at && i < at + len ? 32 : (h[i] as number);
  return sum;
}

/** One pax record, `<length> <key>=<value>\n`, its length counting its own digits. */
export function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let len = Buffer.byteLength(body) + 1;
  while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
  return `${len}${body}`;
}
