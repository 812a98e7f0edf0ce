/**
 * Writes eStargz layers (containerd/stargz-snapshotter's docs/estargz.md) for tests and
 * benchmarks: every non-empty file's bytes in gzip members of their own (split into chunks),
 * tar headers and padding in the members between, the TOC as the last member and the 51-byte
 * footer. The result is still a plain gzip tar, so a whole pull unpacks it as any layer.
 *
 * Written apart from the server's own writer (src/storage/images/estargz-writer.ts) on purpose:
 * the reader is checked against a second reading of the format, not against itself.
 */
import { createHash } from "node:crypto";
import { gunzipSync, gzipSync } from "node:zlib";
import { makeTar, sha256, type TarSpec } from "./registry.js";

export interface EStargzLayer {
  blob: Buffer;
  tocDigest: string;
  /** sha256 of the decompressed tar (the config's diff_id). */
  diffId: string;
}

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

const TYPE: Record<string, string> = { file: "reg", dir: "dir", symlink: "symlink", hardlink: "hardlink" };

/** The tar bytes of `e` before its data: makeTar's output less data, padding and end blocks. */
function headerOf(e: TarSpec, dataLen: number): Buffer {
  const t = makeTar([e]);
  const padded = Math.ceil(dataLen / 512) * 512;
  return t.subarray(0, t.length - 1024 - padded);
}

function footer(tocOffset: number): Buffer {
  const sub = Buffer.from(`${tocOffset.toString(16).padStart(16, "0")}STARGZ`, "latin1");
  const b = Buffer.alloc(51);
  b.set([0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 255]);
  b.writeUInt16LE(26, 10);
  b.set([0x53, 0x47], 12);
  b.writeUInt16LE(22, 14);
  sub.copy(b, 16);
  b.set([1, 0, 0, 0xff, 0xff], 38);
  return b; // CRC32 and ISIZE of an empty member are 0
}

/**
 * An eStargz layer of `entries`. Files named in `prefetch` come first, before a
 * `.prefetch.landmark`; without it a `.no.prefetch.landmark` leads.
 */
export function estargzLayer(entries: TarSpec[], o: { chunkSize?: number; prefetch?: string[] } = {}): EStargzLayer {
  const chunkSize = o.chunkSize ?? 4 * 1024 * 1024;
  const first = new Set(o.prefetch ?? []);
  const landmark: TarSpec = {
    name: first.size ? ".prefetch.landmark" : ".no.prefetch.landmark",
    content: Buffer.from([0xf]),
  };
  const ordered = first.size
    ? [...entries.filter((e) => first.has(e.name)), landmark, ...entries.filter((e) => !first.has(e.name))]
    : [landmark, ...entries];
  const out: Buffer[] = [];
  let pos = 0;
  let pending: Buffer[] = [];
  const emit = (b: Buffer) => {
    out.push(b);
    pos += b.length;
  };
  const flush = () => {
    if (pending.length) emit(gzipSync(Buffer.concat(pending)));
    pending = [];
  };
  const toc: TocEntry[] = [];
  for (const e of ordered) {
    const type = e.type ?? "file";
    const data = type === "file" ? Buffer.from(e.content ?? "") : Buffer.alloc(0);
    pending.push(headerOf(e, data.length));
    const entry: TocEntry = {
      name: type === "dir" && !e.name.endsWith("/") ? `${e.name}/` : e.name,
      type: TYPE[type] ?? type,
      mode: e.mode ?? (type === "dir" ? 0o755 : 0o644),
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      modtime: new Date((e.mtime ?? 1_700_000_000) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z"),
      ...(e.linkname ? { linkName: e.linkname } : {}),
    };
    if (type !== "file" || data.length === 0) {
      toc.push(type === "file" ? { ...entry, size: 0 } : entry);
      continue;
    }
    flush();
    for (let at = 0; at < data.length; at += chunkSize) {
      const part = data.subarray(at, at + chunkSize);
      const last = at + chunkSize >= data.length;
      const c = {
        offset: pos,
        chunkOffset: at,
        chunkSize: last ? 0 : part.length,
        chunkDigest: sha256(part),
      };
      toc.push(
        at === 0
          ? { ...entry, size: data.length, digest: sha256(data), ...c }
          : { name: entry.name, type: "chunk", mode: 0, uid: 0, gid: 0, ...c },
      );
      emit(gzipSync(part));
    }
    pending.push(Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  flush();
  const tocOffset = pos;
  const json = Buffer.from(JSON.stringify({ version: 1, entries: toc }, null, "\t"));
  emit(gzipSync(makeTar([{ name: "stargz.index.json", content: json }])));
  emit(footer(tocOffset));
  const blob = Buffer.concat(out);
  return {
    blob,
    tocDigest: `sha256:${createHash("sha256").update(json).digest("hex")}`,
    diffId: sha256(gunzipSync(blob)),
  };
}
