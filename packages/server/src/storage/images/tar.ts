/**
 * A streaming tar reader (ustar, pax, GNU long names, base-256 numbers). It only parses: what
 * to do with an entry, and whether its path is safe, is unpack.ts's job.
 */
import { ImagePullError } from "./errors.js";
import {
  BLOCK,
  EXTENSION_FLAGS as EXT,
  FIELD,
  headerChecksum,
  type TarEntryType,
  TYPEFLAG,
  USTAR_MAGIC,
} from "./ustar.js";

export type { TarEntryType };

export interface TarHeader {
  name: string;
  type: TarEntryType;
  /** The raw typeflag, for messages about "other" entries. */
  typeflag: string;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  /** Seconds since the epoch (pax may give fractions). */
  mtime: number;
  linkname: string;
  /** pax `SCHILY.xattr.*` values, keyed without the prefix. */
  xattrs: Record<string, Buffer>;
}

/** Pulls exact byte counts out of an async iterable of chunks. */
class ByteReader {
  private buf: Buffer[] = [];
  private len = 0;
  /** Bytes handed out so far: the offset of the next byte in the stream. */
  pos = 0;
  private done = false;
  private readonly it: AsyncIterator<Buffer>;

  constructor(src: AsyncIterable<Buffer>) {
    this.it = src[Symbol.asyncIterator]();
  }

  private async fill(n: number): Promise<boolean> {
    while (this.len < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else if (r.value.length) {
        this.buf.push(r.value);
        this.len += r.value.length;
      }
    }
    return this.len >= n;
  }

  /** Exactly `n` bytes, or null at a clean end of stream. */
  async read(n: number): Promise<Buffer | null> {
    if (!(await this.fill(n))) {
      if (this.len === 0) return null;
      throw new ImagePullError("bad-layer", "tar stream ends in the middle of a record");
    }
    const all = this.buf.length === 1 ? this.buf[0]! : Buffer.concat(this.buf);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.buf = rest.length ? [rest] : [];
    this.len = rest.length;
    this.pos += n;
    return out;
  }

  /** Up to `n` bytes in whatever pieces arrive. */
  async *pieces(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (!this.len && !(await this.fill(1))) throw new ImagePullError("bad-layer", "tar stream ends inside a file");
      const head = this.buf[0]!;
      if (head.length <= left) {
        this.buf.shift();
        this.len -= head.length;
        this.pos += head.length;
        left -= head.length;
        yield head;
      } else {
        this.buf[0] = head.subarray(left);
        this.len -= left;
        this.pos += left;
        yield head.subarray(0, left);
        left = 0;
      }
    }
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.pieces(n));
  }

  /** Consumes whatever follows the archive (zero padding), so hashes of the whole stream complete. */
  async drain(): Promise<void> {
    this.buf = [];
    this.len = 0;
    while (!this.done) if ((await this.it.next()).done) this.done = true;
  }
}

function str(b: Buffer, [start, len]: readonly [number, number]): string {
  const s = b.subarray(start, start + len);
  const nul = s.indexOf(0);
  return (nul >= 0 ? s.subarray(0, nul) : s).toString("utf8");
}

function num(b: Buffer, [start, len]: readonly [number, number]): number {
  const f = b.subarray(start, start + len);
  if (f[0]! & 0x80) {
    // GNU base-256: big-endian two's complement with the top bit as marker.
    let v = 0;
    for (let i = 0; i < f.length; i++) v = v * 256 + (i === 0 ? f[i]! & 0x7f : f[i]!);
    return v;
  }
  const t = f.toString("latin1").replace(/\0.*$/s, "").trim();
  return t ? Number.parseInt(t, 8) : 0;
}

function checksumOk(h: Buffer): boolean {
  return headerChecksum(h) === num(h, FIELD.checksum);
}

/** Entry type by flag; old tars write files as NUL, and "7" (contiguous) is a file too. */
const TYPES: Record<string, TarEntryType> = {
  ...Object.fromEntries(Object.entries(TYPEFLAG).map(([type, flag]) => [flag, type as TarEntryType])),
  "\0": "file",
  "7": "file",
};

function parsePax(data: Buffer): Record<string, string | Buffer> {
  const out: Record<string, string | Buffer> = {};
  let i = 0;
  while (i < data.length) {
    const sp = data.indexOf(0x20, i);
    if (sp < 0) break;
    const len = Number.parseInt(data.subarray(i, sp).toString("latin1"), 10);
    if (!(len > 0) || i + len > data.length) throw new ImagePullError("bad-layer", "malformed pax header");
    const rec = data.subarray(sp + 1, i + len - 1); // drop trailing \n
    const eq = rec.indexOf(0x3d);
    if (eq > 0) {
      const key = rec.subarray(0, eq).toString("utf8");
      const val = rec.subarray(eq + 1);
      out[key] = key.startsWith("SCHILY.xattr.") ? Buffer.from(val) : val.toString("utf8");
    }
    i += len;
  }
  return out;
}

export interface TarEntry {
  header: TarHeader;
  /** Offset of the entry's data in the (uncompressed) stream, for indexing archives. */
  offset: number;
  /** The entry's data; must be consumed or ignored before the next entry is requested. */
  body: AsyncIterable<Buffer>;
}

/** Iterates the entries of a tar stream. Unread bodies are skipped automatically. */
export async function* readTar(src: AsyncIterable<Buffer>): AsyncGenerator<TarEntry> {
  const r = new ByteReader(src);
  let globalPax: Record<string, string | Buffer> = {};
  let pax: Record<string, string | Buffer> = {};
  let longName: string | undefined;
  let longLink: string | undefined;
  for (;;) {
    const h = await r.read(BLOCK);
    if (!h || h.every((b) => b === 0)) break;
    if (!checksumOk(h)) throw new ImagePullError("bad-layer", "tar header checksum mismatch (not a tar, or corrupt)");
    const typeflag = String.fromCharCode(h[FIELD.typeflag[0]]!);
    const size = num(h, FIELD.size);
    const padded = Math.ceil(size / BLOCK) * BLOCK;
    if (typeflag === EXT.pax || typeflag === EXT.globalPax || typeflag === EXT.longName || typeflag === EXT.longLink) {
      if (size > 16 << 20) throw new ImagePullError("bad-layer", "tar extended header larger than 16 MiB");
      const data = (await r.read(padded))?.subarray(0, size) ?? Buffer.alloc(0);
      if (typeflag === EXT.pax) pax = { ...pax, ...parsePax(data) };
      else if (typeflag === EXT.globalPax) globalPax = { ...globalPax, ...parsePax(data) };
      else {
        const s = str(data, [0, data.length]);
        if (typeflag === EXT.longName) longName = s;
        else longLink = s;
      }
      continue;
    }
    const ext = { ...globalPax, ...pax };
    const magic = h.subarray(FIELD.magic[0], FIELD.magic[0] + FIELD.magic[1]).toString("latin1");
    let name = str(h, FIELD.name);
    const prefix = magic === USTAR_MAGIC ? str(h, FIELD.prefix) : "";
    if (prefix) name = `${prefix}/${name}`;
    const s = (k: string) => (typeof ext[k] === "string" ? (ext[k] as string) : undefined);
    const xattrs: Record<string, Buffer> = {};
    for (const [k, v] of Object.entries(ext))
      if (k.startsWith("SCHILY.xattr.") && Buffer.isBuffer(v)) xattrs[k.slice(13)] = v;
    const header: TarHeader = {
      name: s("path") ?? longName ?? name,
      type: TYPES[typeflag] ?? "other",
      typeflag,
      mode: num(h, FIELD.mode) & 0o7777,
      uid: s("uid") !== undefined ? Number(s("uid")) : num(h, FIELD.uid),
      gid: s("gid") !== undefined ? Number(s("gid")) : num(h, FIELD.gid),
      size: s("size") !== undefined ? Number(s("size")) : size,
      mtime: s("mtime") !== undefined ? Number(s("mtime")) : num(h, FIELD.mtime),
      linkname: s("linkpath") ?? longLink ?? str(h, FIELD.linkname),
      xattrs,
    };
    // Old tars mark directories only by a trailing slash.
    if (header.type === "file" && header.name.endsWith("/")) header.type = "dir";
    pax = {};
    longName = longLink = undefined;
    const dataSize = header.type === "file" ? header.size : header.type === "other" ? header.size : 0;
    if (!Number.isSafeInteger(dataSize) || dataSize < 0)
      throw new ImagePullError("bad-layer", `bad size for ${header.name}`);
    let consumed = false;
    const body: AsyncIterable<Buffer> = {
      [Symbol.asyncIterator]: () => {
        if (consumed) throw new Error("tar entry body read twice");
        consumed = true;
        return r.pieces(dataSize)[Symbol.asyncIterator]();
      },
    };
    yield { header, body, offset: r.pos };
    // Skip what the consumer left (a partially read body is not supported: read all or nothing).
    const rest = consumed ? 0 : dataSize;
    await r.skip(rest + (Math.ceil(dataSize / BLOCK) * BLOCK - dataSize));
  }
  await r.drain();
}
