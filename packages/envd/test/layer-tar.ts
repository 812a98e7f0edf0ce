/**
 * The tests' reader and writer of the tar dialect of filesystem layers (what envd writes at a
 * filesystem-only pause and reads back at the resume; envd's own is native/internal/fslayer): ustar
 * headers, a pax record only where a value does not fit (long or non-ASCII names, big
 * numbers). Deletions are OCI whiteouts (`.wh.<name>`). Hostile and cut layers are made with it.
 */

const BLOCK = 512;
export const WHITEOUT_PREFIX = ".wh.";

export type LayerEntryType = "file" | "dir" | "symlink" | "hardlink";

export interface LayerHeader {
  /** Relative to /, no leading slash; directories without a trailing one. */
  path: string;
  type: LayerEntryType;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Seconds since the epoch. */
  mtime: number;
  /** Symlink target, or the hard link's first path (relative to /). */
  linkname: string;
}

const TYPEFLAG: Record<LayerEntryType, string> = { file: "0", hardlink: "1", symlink: "2", dir: "5" };

function writeOctal(buf: Buffer, off: number, len: number, value: number): void {
  buf.write(`${value.toString(8).padStart(len - 1, "0")}\0`, off, len, "ascii");
}

function fitsOctal(value: number, len: number): boolean {
  return Number.isInteger(value) && value >= 0 && value < 8 ** (len - 1);
}

function paxRecord(key: string, value: string): string {
  // The length prefix counts itself: grow until it is stable.
  const body = ` ${key}=${value}\n`;
  let n = Buffer.byteLength(body);
  while (String(n).length + Buffer.byteLength(body) !== n) n = String(n).length + Buffer.byteLength(body);
  return `${n}${body}`;
}

function rawHeader(name: string, typeflag: string, h: Omit<LayerHeader, "path" | "type">): Buffer {
  const b = Buffer.alloc(BLOCK);
  b.write(name, 0, 100, "utf8");
  writeOctal(b, 100, 8, h.mode & 0o7777);
  writeOctal(b, 108, 8, fitsOctal(h.uid, 8) ? h.uid : 0);
  writeOctal(b, 116, 8, fitsOctal(h.gid, 8) ? h.gid : 0);
  writeOctal(b, 124, 12, fitsOctal(h.size, 12) ? h.size : 0);
  writeOctal(b, 136, 12, fitsOctal(Math.floor(h.mtime), 12) ? Math.floor(h.mtime) : 0);
  b.write(typeflag, 156, 1, "ascii");
  b.write(h.linkname, 157, 100, "utf8");
  b.write("ustar\0", 257, 6, "ascii");
  b.write("00", 263, 2, "ascii");
  b.fill(" ", 148, 156);
  let sum = 0;
  for (const byte of b) sum += byte;
  writeOctal(b, 148, 7, sum);
  b[155] = 0x20;
  return b;
}

const isShortAscii = (s: string, max: number) => s.length < max && /^[\x20-\x7e]*$/.test(s);

/** The header block(s) of one entry: a pax record first when a value does not fit ustar. */
export function encodeHeader(h: LayerHeader): Buffer {
  const name = h.type === "dir" ? `${h.path}/` : h.path;
  const pax: string[] = [];
  const nameInPax = !isShortAscii(name, 100);
  if (nameInPax) pax.push(paxRecord("path", name));
  if (!isShortAscii(h.linkname, 100)) pax.push(paxRecord("linkpath", h.linkname));
  if (!fitsOctal(h.size, 12)) pax.push(paxRecord("size", String(h.size)));
  if (!fitsOctal(h.uid, 8)) pax.push(paxRecord("uid", String(h.uid)));
  if (!fitsOctal(h.gid, 8)) pax.push(paxRecord("gid", String(h.gid)));
  // The name stays in the ustar header unless it is the value the pax record carries: a long
  // link target or a big size alone must not leave the entry nameless (readers drop those).
  const main = rawHeader(nameInPax ? "" : name, TYPEFLAG[h.type], h);
  if (!pax.length) return main;
  const data = Buffer.from(pax.join(""), "utf8");
  const paxHead = rawHeader("PaxHeader", "x", {
    mode: 0o644,
    uid: 0,
    gid: 0,
    size: data.length,
    mtime: 0,
    linkname: "",
  });
  return Buffer.concat([paxHead, data, Buffer.alloc(padding(data.length)), main]);
}

export function padding(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

/** Two zero blocks end an archive. */
export const END_OF_ARCHIVE = Buffer.alloc(2 * BLOCK);

/** Pulls exact byte counts out of an async iterable of chunks. */
class Bytes {
  private buf: Buffer = Buffer.alloc(0);
  private readonly it: AsyncIterator<Buffer>;
  private done = false;

  constructor(src: AsyncIterable<Buffer>) {
    this.it = src[Symbol.asyncIterator]();
  }

  async read(n: number): Promise<Buffer | null> {
    while (this.buf.length < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : r.value;
    }
    if (this.buf.length < n) {
      if (this.buf.length === 0) return null;
      throw new Error("layer ends in the middle of a record");
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Up to `max` bytes, at least one (for streaming a file's contents). */
  async some(max: number): Promise<Buffer> {
    if (!this.buf.length && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else this.buf = r.value;
    }
    if (!this.buf.length) throw new Error("layer ends in the middle of a file");
    const out = this.buf.subarray(0, max);
    this.buf = this.buf.subarray(out.length);
    return out;
  }
}

const str = (b: Buffer, off: number, len: number) => {
  const s = b.subarray(off, off + len);
  const z = s.indexOf(0);
  return (z < 0 ? s : s.subarray(0, z)).toString("utf8");
};
const num = (b: Buffer, off: number, len: number) => Number.parseInt(str(b, off, len).trim() || "0", 8);

function parsePax(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < data.length) {
    const sp = data.indexOf(0x20, i);
    const len = Number.parseInt(data.subarray(i, sp).toString("ascii"), 10);
    if (!(len > 0) || sp < 0) throw new Error("bad pax record");
    const rec = data.subarray(sp + 1, i + len - 1).toString("utf8");
    const eq = rec.indexOf("=");
    out[rec.slice(0, eq)] = rec.slice(eq + 1);
    i += len;
  }
  return out;
}

const TYPES: Record<string, LayerEntryType> = {
  "0": "file",
  "\0": "file",
  "1": "hardlink",
  "2": "symlink",
  "5": "dir",
};

/** One entry: its header and a reader of exactly its contents (call it before the next entry). */
export interface LayerEntry {
  header: LayerHeader;
  contents(): AsyncIterable<Buffer>;
}

/** Reads a layer entry by entry; entries of other types are refused. */
export async function* readLayer(src: AsyncIterable<Buffer>): AsyncGenerator<LayerEntry> {
  const r = new Bytes(src);
  let pax: Record<string, string> = {};
  for (;;) {
    const block = await r.read(BLOCK);
    if (!block) throw new Error("layer ends without an end-of-archive marker");
    if (block.every((x) => x === 0)) return;
    const flag = String.fromCharCode(block[156] ?? 0);
    const size = Number(pax.size ?? num(block, 124, 12));
    if (flag === "x") {
      const data = await r.read(size + padding(size));
      pax = parsePax((data ?? Buffer.alloc(0)).subarray(0, size));
      continue;
    }
    const type = TYPES[flag];
    if (!type) throw new Error(`layer entry of unsupported type '${flag}'`);
    const name = pax.path ?? str(block, 0, 100);
    const header: LayerHeader = {
      path: name.replace(/\/+$/, ""),
      type,
      mode: num(block, 100, 8),
      uid: Number(pax.uid ?? num(block, 108, 8)),
      gid: Number(pax.gid ?? num(block, 116, 8)),
      size: type === "file" ? size : 0,
      mtime: num(block, 136, 12),
      linkname: pax.linkpath ?? str(block, 157, 100),
    };
    pax = {};
    let left = header.size;
    yield {
      header,
      contents: async function* () {
        while (left > 0) {
          const chunk = await r.some(Math.min(left, 1 << 20));
          left -= chunk.length;
          yield chunk;
        }
      },
    };
    // Whatever the consumer left unread is skipped.
    while (left > 0) left -= (await r.some(Math.min(left, 1 << 20))).length;
    if (header.size) await r.read(padding(header.size));
  }
}
