/**
 * Rewrites a layer's tar stream as an eStargz blob (docs/estargz.md of stargz-snapshotter):
 * every non-empty file's bytes in gzip members of their own, CHUNK bytes at most each; tar
 * headers and padding in the members between; a `.no.prefetch.landmark` first; the TOC as the
 * last member and the 51-byte footer. The blob is still a plain gzip tar of the same entries
 * (any runtime unpacks it), and estargz.ts reads it file by file.
 */
import { createHash, type Hash } from "node:crypto";
import { createWriteStream, type WriteStream } from "node:fs";
import { gzipSync } from "node:zlib";
import { FOOTER_SIZE } from "./estargz.js";
import type { TarEntry, TarHeader } from "./tar.js";
import { BLOCK, FIELD, headerChecksum, paxRecord, TYPEFLAG, USTAR_MAGIC } from "./ustar.js";

/** Chunk size of large files (stargz-snapshotter's default): a first read fetches at most this. */
export const CHUNK = 4 * 1024 * 1024;
const LANDMARK = ".no.prefetch.landmark";
const TOC_NAME = "stargz.index.json";
const MAX_OCTAL = { 8: 0o7777777, 12: 0o77777777777 } as const;

interface TocEntry {
  name: string;
  type: string;
  size?: number;
  modtime?: string;
  linkName?: string;
  mode: number;
  uid: number;
  gid: number;
  digest?: string;
  offset?: number;
  chunkOffset?: number;
  chunkSize?: number;
  chunkDigest?: string;
}

export interface WrittenLayer {
  /** sha256 of the blob (its digest) and its size. */
  digest: string;
  size: number;
  /** sha256 of the uncompressed tar (the config's diff_id). */
  diffId: string;
  /** sha256 of the TOC's JSON (the layer's `containerd.io/snapshot/stargz/toc.digest`). */
  tocDigest: string;
}

const TOC_TYPE: Record<string, string> = {
  file: "reg",
  dir: "dir",
  symlink: "symlink",
  hardlink: "hardlink",
  char: "char",
  block: "block",
  fifo: "fifo",
};

/** A ustar header block for `h` (size `size`), with a pax record first for what ustar cannot hold. */
function headerBlocks(
  h: Pick<TarHeader, "name" | "type" | "mode" | "uid" | "gid" | "mtime" | "linkname" | "xattrs">,
  size: number,
): Buffer {
  const pax: string[] = [];
  const name = h.type === "dir" && !h.name.endsWith("/") ? `${h.name}/` : h.name;
  if (Buffer.byteLength(name) > 99) pax.push(paxRecord("path", name));
  if (Buffer.byteLength(h.linkname) > 99) pax.push(paxRecord("linkpath", h.linkname));
  if (size > MAX_OCTAL[12]) pax.push(paxRecord("size", String(size)));
  if (h.uid > MAX_OCTAL[8]) pax.push(paxRecord("uid", String(h.uid)));
  if (h.gid > MAX_OCTAL[8]) pax.push(paxRecord("gid", String(h.gid)));
  for (const [k, v] of Object.entries(h.xattrs)) pax.push(paxRecord(`SCHILY.xattr.${k}`, v.toString("latin1")));
  const block = (n: string, flag: string, len: number, link: string): Buffer => {
    const b = Buffer.alloc(BLOCK);
    const put = ([at, l]: readonly [number, number], v: string, enc: BufferEncoding = "latin1") =>
      b.write(v, at, l, enc);
    const octal = (v: number, width: number) =>
      `${Math.min(v, width === 12 ? MAX_OCTAL[12] : MAX_OCTAL[8])
        .toString(8)
        .padStart(width - 1, "0")}\0`;
    put(FIELD.name, n.slice(0, 99), "utf8");
    put(FIELD.mode, octal(h.mode & 0o7777, FIELD.mode[1]));
    put(FIELD.uid, octal(h.uid, FIELD.uid[1]));
    put(FIELD.gid, octal(h.gid, FIELD.gid[1]));
    put(FIELD.size, octal(len, FIELD.size[1]));
    put(FIELD.mtime, octal(Math.max(0, Math.floor(h.mtime)), FIELD.mtime[1]));
    put(FIELD.typeflag, flag);
    put(FIELD.linkname, link.slice(0, 99), "utf8");
    put(FIELD.magic, USTAR_MAGIC);
    put(FIELD.version, "00");
    put(FIELD.checksum, `${headerChecksum(b).toString(8).padStart(6, "0")}\0 `);
    return b;
  };
  const flag = TYPEFLAG[h.type as keyof typeof TYPEFLAG];
  const main = block(name, flag, size, h.linkname);
  if (!pax.length) return main;
  const body = Buffer.from(pax.join(""));
  return Buffer.concat([block("PaxHeader", "x", body.length, ""), body, pad(body.length), main]);
}

const pad = (n: number) => Buffer.alloc((BLOCK - (n % BLOCK)) % BLOCK);

function footer(tocOffset: number): Buffer {
  const b = Buffer.alloc(FOOTER_SIZE);
  b.set([0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 255]);
  b.writeUInt16LE(26, 10);
  b.set([0x53, 0x47], 12);
  b.writeUInt16LE(22, 14);
  b.write(`${tocOffset.toString(16).padStart(16, "0")}STARGZ`, 16, 22, "latin1");
  b.set([1, 0, 0, 0xff, 0xff], 38); // an empty stored block; CRC32 and ISIZE of nothing are 0
  return b;
}

const rfc3339 = (s: number) =>
  s > 0 ? new Date(Math.floor(s) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z") : undefined;

/** Writes the eStargz form of `entries` (a layer's tar, as tar.ts reads it) to `path`. */
export async function writeEStargz(entries: AsyncIterable<TarEntry>, path: string): Promise<WrittenLayer> {
  const out: WriteStream = createWriteStream(path, { flags: "wx", mode: 0o600 });
  const blobHash = createHash("sha256");
  const diffHash = createHash("sha256");
  let pos = 0;
  let pending: Buffer[] = [];
  let pendingLen = 0;
  const emit = async (b: Buffer) => {
    blobHash.update(b);
    pos += b.length;
    if (!out.write(b)) await new Promise<void>((r) => out.once("drain", r));
  };
  /** Uncompressed bytes for the member being gathered (headers, padding). */
  const gather = async (b: Buffer) => {
    diffHash.update(b);
    pending.push(b);
    pendingLen += b.length;
    if (pendingLen >= CHUNK) await flush();
  };
  const flush = async () => {
    if (!pendingLen) return;
    const member = gzipSync(Buffer.concat(pending));
    pending = [];
    pendingLen = 0;
    await emit(member);
  };
  const toc: TocEntry[] = [];
  let tocDigest = "";
  /** A file's payload, in members of CHUNK bytes at most, its TOC entries beside. */
  const payload = async (entry: TocEntry, body: AsyncIterable<Buffer> | Iterable<Buffer>, size: number) => {
    await flush();
    const file: Hash = createHash("sha256");
    const entries: TocEntry[] = [];
    let buf: Buffer[] = [];
    let bufLen = 0;
    let at = 0;
    const cut = async () => {
      const part = Buffer.concat(buf);
      buf = [];
      bufLen = 0;
      const c = {
        offset: pos,
        chunkOffset: at,
        chunkSize: part.length,
        chunkDigest: `sha256:${createHash("sha256").update(part).digest("hex")}`,
      };
      entries.push(at === 0 ? { ...entry, ...c } : { name: entry.name, type: "chunk", mode: 0, uid: 0, gid: 0, ...c });
      at += part.length;
      diffHash.update(part);
      await emit(gzipSync(part));
    };
    for await (const c of body) {
      file.update(c);
      let rest = c;
      while (rest.length) {
        const take = Math.min(rest.length, CHUNK - bufLen);
        buf.push(rest.subarray(0, take));
        bufLen += take;
        rest = rest.subarray(take);
        if (bufLen === CHUNK) await cut();
      }
    }
    if (bufLen) await cut();
    if (at !== size) throw new Error(`${entry.name}: ${at} bytes read of ${size}`);
    // The last chunk says 0 (to the end of the file), as the format asks.
    const last = entries.at(-1) as TocEntry;
    last.chunkSize = 0;
    (entries[0] as TocEntry).digest = `sha256:${file.digest("hex")}`;
    toc.push(...entries);
    await gather(pad(size));
  };

  try {
    const landmark = Buffer.from([0xf]);
    const lm = {
      name: LANDMARK,
      type: "file" as const,
      mode: 0o644,
      uid: 0,
      gid: 0,
      mtime: 0,
      linkname: "",
      xattrs: {},
    };
    await gather(headerBlocks(lm, 1));
    await payload({ name: LANDMARK, type: "reg", size: 1, mode: 0o644, uid: 0, gid: 0 }, [landmark], 1);
    for await (const e of entries) {
      const h = e.header;
      if (h.type === "other") continue;
      const size = h.type === "file" ? h.size : 0;
      await gather(headerBlocks(h, size));
      const modtime = rfc3339(h.mtime);
      const entry: TocEntry = {
        name: h.type === "dir" && !h.name.endsWith("/") ? `${h.name}/` : h.name,
        type: TOC_TYPE[h.type] ?? "reg",
        mode: h.mode & 0o7777,
        uid: h.uid,
        gid: h.gid,
        ...(modtime ? { modtime } : {}),
        ...(h.linkname ? { linkName: h.linkname } : {}),
      };
      if (h.type === "file" && size > 0) await payload({ ...entry, size }, e.body, size);
      else toc.push(h.type === "file" ? { ...entry, size: 0 } : entry);
    }
    await flush();
    const tocOffset = pos;
    const json = Buffer.from(JSON.stringify({ version: 1, entries: toc }));
    tocDigest = `sha256:${createHash("sha256").update(json).digest("hex")}`;
    const tocTar = Buffer.concat([
      headerBlocks(
        { name: TOC_NAME, type: "file", mode: 0o644, uid: 0, gid: 0, mtime: 0, linkname: "", xattrs: {} },
        json.length,
      ),
      json,
      pad(json.length),
      Buffer.alloc(BLOCK * 2),
    ]);
    diffHash.update(tocTar);
    await emit(gzipSync(tocTar));
    await emit(footer(tocOffset));
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  } catch (err) {
    out.destroy();
    throw err;
  }
  return {
    digest: `sha256:${blobHash.digest("hex")}`,
    size: pos,
    diffId: `sha256:${diffHash.digest("hex")}`,
    tocDigest,
  };
}
