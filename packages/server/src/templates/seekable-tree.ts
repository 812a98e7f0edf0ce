import { createHash } from "node:crypto";
import { createGunzip } from "node:zlib";
import { z } from "zod";
import {
  ContentStore,
  type LayerRanges,
  modtimeOf,
  type SeekableImage,
  type SeekableLayer,
  type TocEntry,
} from "../storage/images/index.js";
import { type IndexEntry, type TreeIndex, treeConfig } from "./tree-index.js";

/**
 * An eStargz image's tree, built from its layers' TOCs alone: the index aenv-lazyfs mounts
 * (layers applied in order, whiteouts and opaque folders honoured) and, for each content key,
 * where its bytes are in which layer. Nothing of a file is read until it is opened.
 */

/** One gzip member run of a file: compressed bytes [offset, end), `size` bytes from `inner` on. */
const Chunk = z.object({
  offset: z.number().int().min(0),
  end: z.number().int().min(0),
  inner: z.number().int().min(0),
  size: z.number().int().min(0),
  digest: z.string().max(80),
});
const FileRun = z.object({ layer: z.string().max(80), chunks: z.array(Chunk).min(1) });
export type FileRun = z.infer<typeof FileRun>;
/** Where each content key's bytes are: written beside the index, read again after a restart. */
export const FileRuns = z.record(z.string(), FileRun);
export type FileRuns = z.infer<typeof FileRuns>;

export interface SeekableTree {
  index: TreeIndex;
  runs: FileRuns;
  /** Keys of the files the layers mark to prefetch (before `.prefetch.landmark`), in layer order. */
  prefetch: string[];
}

/** Why an eStargz image cannot be served lazily; it is then pulled whole. */
export class NotSeekable extends Error {}

/** A compressed span larger than this is not read by range (it would be held in memory whole). */
const MAX_SPAN_BYTES = 64 * 1024 * 1024;
const WH = ".wh.";
const OPAQUE = ".wh..wh..opq";
const LANDMARKS = new Set([".prefetch.landmark", ".no.prefetch.landmark"]);

function pathOf(name: string): string {
  const parts = name.split("/").filter((x) => x !== "" && x !== ".");
  if (parts.includes("..")) throw new NotSeekable(`entry ${name.slice(0, 200)} climbs out of the tree`);
  return parts.join("/");
}

const parentOf = (p: string) => (p.includes("/") ? p.slice(0, p.lastIndexOf("/")) : "");
const baseOf = (p: string) => p.slice(p.lastIndexOf("/") + 1);

/** Every strict ancestor of `p`, nearest last ("" is the root). */
function ancestors(p: string): string[] {
  const out = [""];
  let i = p.indexOf("/");
  while (i >= 0) {
    out.push(p.slice(0, i));
    i = p.indexOf("/", i + 1);
  }
  return out;
}

/** The tree of `img`: its index and where each file's content is. */
export function seekableTree(img: SeekableImage): SeekableTree {
  const merged = new Map<string, IndexEntry>();
  merged.set("", { p: "", t: "d", m: 0o755, u: 0, g: 0, s: 0, mt: 0 });
  const runs: FileRuns = {};
  const prefetch: string[] = [];
  for (const layer of img.layers) applyLayer(layer, merged, runs, prefetch);
  const entries = [...merged.values()].sort((a, b) => (a.p < b.p ? -1 : a.p > b.p ? 1 : 0));
  const config = treeConfig(img.config);
  // A file an upper layer replaced is not worth prefetching.
  const live = new Set(entries.flatMap((e) => (e.k ? [e.k] : [])));
  return { index: { v: 1, config, entries }, runs, prefetch: [...new Set(prefetch)].filter((k) => live.has(k)) };
}

function applyLayer(layer: SeekableLayer, merged: Map<string, IndexEntry>, runs: FileRuns, prefetch: string[]): void {
  const starts = [
    ...new Set([...layer.toc.entries.flatMap((e) => (e.offset !== undefined ? [e.offset] : [])), layer.tocOffset]),
  ].sort((a, b) => a - b);
  const endOf = (offset: number): number => {
    let lo = 0;
    let hi = starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((starts[mid] as number) <= offset) lo = mid + 1;
      else hi = mid;
    }
    const end = starts[lo] ?? layer.tocOffset;
    if (end - offset > MAX_SPAN_BYTES) throw new NotSeekable(`a gzip member of ${layer.digest} is over 64 MiB`);
    return end;
  };
  // Whiteouts hide only what lower layers hold: applied before this layer's own entries.
  const removed = new Set<string>();
  const opaque = new Set<string>();
  for (const e of layer.toc.entries) {
    if (e.type === "chunk") continue;
    const p = pathOf(e.name);
    const base = baseOf(p);
    if (base === OPAQUE) opaque.add(parentOf(p));
    else if (base.startsWith(WH)) removed.add(`${parentOf(p) ? `${parentOf(p)}/` : ""}${base.slice(WH.length)}`);
  }
  if (removed.size || opaque.size) {
    for (const p of [...merged.keys()]) {
      if (p === "") continue;
      const up = ancestors(p);
      if (removed.has(p) || up.some((a) => removed.has(a) || opaque.has(a))) merged.delete(p);
    }
  }
  let current: { size: number; run: FileRun } | undefined;
  let beforeLandmark: string[] = [];
  for (const e of layer.toc.entries) {
    if (e.type === "chunk") {
      if (!current || e.offset === undefined)
        throw new NotSeekable(`chunk of ${e.name.slice(0, 200)} without its file`);
      current.run.chunks.push(chunkOf(e, current.size, endOf));
      continue;
    }
    current = undefined;
    const p = pathOf(e.name);
    const base = baseOf(p);
    if (base.startsWith(WH)) continue;
    if (p !== "" && !p.includes("/") && LANDMARKS.has(p)) {
      if (p === ".prefetch.landmark") prefetch.push(...beforeLandmark);
      beforeLandmark = [];
      continue;
    }
    const entry = indexEntryOf(e, p, merged);
    if (!entry) continue;
    if (p !== "") makeParents(p, merged);
    const old = merged.get(p);
    if (old?.t === "d" && entry.t !== "d") {
      for (const q of [...merged.keys()]) if (q.startsWith(`${p}/`)) merged.delete(q);
    }
    merged.set(p, entry);
    if (e.type === "reg" && entry.k) {
      if (e.offset === undefined) throw new NotSeekable(`${p.slice(0, 200)} has no offset`);
      const run: FileRun = { layer: layer.digest, chunks: [chunkOf(e, entry.s, endOf)] };
      // The same content twice (another path, same key) is read from where it came first; the
      // later one's chunks go to this run, which is then kept nowhere.
      runs[entry.k] ??= run;
      current = { size: entry.s, run };
      beforeLandmark.push(entry.k);
    }
  }
}

function chunkOf(e: TocEntry, fileSize: number, endOf: (offset: number) => number) {
  const offset = e.offset as number;
  const from = e.chunkOffset ?? 0;
  const size = e.chunkSize ? e.chunkSize : fileSize - from;
  if (size < 0 || from + size > fileSize) throw new NotSeekable(`chunk of ${e.name.slice(0, 200)} is outside its file`);
  return { offset, end: endOf(offset), inner: e.innerOffset ?? 0, size, digest: e.chunkDigest ?? "" };
}

/** The index entry a TOC entry makes at `p`; undefined for what a tree does not hold (devices, fifos). */
function indexEntryOf(e: TocEntry, p: string, merged: Map<string, IndexEntry>): IndexEntry | undefined {
  const meta = { m: (e.mode ?? 0o644) & 0o7777, u: e.uid ?? 0, g: e.gid ?? 0, mt: modtimeOf(e) };
  switch (e.type) {
    case "dir":
      return { p, t: "d", s: 0, ...meta };
    case "symlink":
      return { p, t: "l", s: 0, l: e.linkName ?? "", ...meta, m: 0o777 }; // as lstat shows any link
    case "hardlink": {
      const target = merged.get(pathOf(e.linkName ?? ""));
      if (target?.t !== "f") throw new NotSeekable(`hard link ${p.slice(0, 200)} to no file before it`);
      return { ...target, p };
    }
    case "reg": {
      const size = e.size ?? 0;
      if (size === 0) return { p, t: "f", s: 0, ...meta };
      if (!e.digest) throw new NotSeekable(`${p.slice(0, 200)} has no digest in its TOC`);
      const k = ContentStore.key(e.digest.slice("sha256:".length), {
        mode: meta.m,
        uid: meta.u,
        gid: meta.g,
        mtime: meta.mt,
      });
      return { p, t: "f", s: size, k, ...meta };
    }
    default:
      return undefined;
  }
}

/** Folders a layer names only through their children, as unpack makes them. */
function makeParents(p: string, merged: Map<string, IndexEntry>): void {
  for (const a of ancestors(p)) {
    const have = merged.get(a);
    if (have?.t === "d") continue;
    if (have) throw new NotSeekable(`${p.slice(0, 200)} is written through ${a}, which is not a folder`);
    merged.set(a, { p: a, t: "d", m: 0o755, u: 0, g: 0, s: 0, mt: 0 });
  }
}

/**
 * A file's bytes from its layer, chunk by chunk: each chunk's gzip member read by one range
 * request and inflated only as far as the chunk goes (a member that inflates to more is cut).
 * A chunk that does not match its TOC digest is refused; the content store checks the whole
 * file against its key as well, so nothing unverified is ever linked into a tree.
 */
export async function* readRun(ranges: LayerRanges, run: FileRun): AsyncGenerator<Buffer> {
  for (const c of run.chunks) {
    const gz = await ranges(run.layer, c.offset, c.end);
    const hash = createHash("sha256");
    let skip = c.inner;
    let left = c.size;
    const gunzip = createGunzip();
    gunzip.end(gz);
    try {
      for await (const out of gunzip as AsyncIterable<Buffer>) {
        let piece = out;
        if (skip > 0) {
          const n = Math.min(skip, piece.length);
          skip -= n;
          piece = piece.subarray(n);
        }
        if (piece.length > left) piece = piece.subarray(0, left);
        if (piece.length) {
          left -= piece.length;
          hash.update(piece);
          yield piece;
        }
        if (left === 0) break;
      }
    } finally {
      gunzip.destroy();
    }
    if (left > 0) throw new Error(`chunk at ${c.offset} of ${run.layer.slice(0, 19)} ends ${left} bytes short`);
    if (c.digest && `sha256:${hash.digest("hex")}` !== c.digest) {
      throw new Error(`chunk at ${c.offset} of ${run.layer.slice(0, 19)} does not match its TOC digest`);
    }
  }
}
