import { lstat, readdir, readlink } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { type ImageConfig, metaOfKey } from "../storage/images/index.js";

/**
 * An image tree as a list: every folder, link and file with its metadata, a file's bytes by
 * content key. A node that unpacked an image writes it; a node that starts the image lazily
 * mounts it with aenv-lazyfs (native/lazyfs reads the same shape) and fetches content by key.
 */
const Entry = z.object({
  p: z.string().max(4096),
  t: z.enum(["d", "f", "l"]),
  m: z.number().int().min(0).max(0o7777),
  u: z
    .number()
    .int()
    .min(0)
    .max(2 ** 32 - 1),
  g: z
    .number()
    .int()
    .min(0)
    .max(2 ** 32 - 1),
  s: z.number().int().min(0),
  mt: z.number().int(),
  k: z.string().max(200).optional(),
  l: z.string().max(4096).optional(),
});
export type IndexEntry = z.infer<typeof Entry>;

export const TreeIndex = z.object({
  v: z.literal(1),
  /** What a template needs of the image's config. */
  config: z.object({
    env: z.record(z.string(), z.string()),
    workdir: z.string().optional(),
    user: z.string().optional(),
  }),
  entries: z.array(Entry).max(8_000_000),
});
export type TreeIndex = z.infer<typeof TreeIndex>;

/** What a template needs of an image's config, as an index carries it. */
export function treeConfig(c: Pick<ImageConfig, "env" | "workdir" | "user">): TreeIndex["config"] {
  return { env: c.env, ...(c.workdir ? { workdir: c.workdir } : {}), ...(c.user ? { user: c.user } : {}) };
}

/**
 * The index of an unpacked tree; undefined when a file's content key is unknown (the tree
 * was not unpacked through the content store), since such a tree cannot be served by key.
 */
export async function indexTree(
  root: string,
  keysByIno: Map<number, string>,
  config: TreeIndex["config"],
): Promise<TreeIndex | undefined> {
  const entries: IndexEntry[] = [];
  const meta = (st: Awaited<ReturnType<typeof lstat>>) => ({
    m: Number(st.mode) & 0o7777,
    u: Number(st.uid),
    g: Number(st.gid),
    mt: Math.floor(Number(st.mtimeMs) / 1000),
  });
  const top = await lstat(root);
  entries.push({ p: "", t: "d", s: 0, ...meta(top) });
  const queue = [""];
  while (queue.length) {
    const rel = queue.shift() as string;
    const names = (await readdir(join(root, rel))).sort();
    for (const name of names) {
      const p = rel ? `${rel}/${name}` : name;
      const st = await lstat(join(root, p));
      if (st.isDirectory()) {
        entries.push({ p, t: "d", s: 0, ...meta(st) });
        queue.push(p);
      } else if (st.isSymbolicLink()) {
        entries.push({ p, t: "l", s: 0, l: await readlink(join(root, p)), ...meta(st) });
      } else if (st.isFile()) {
        const k = keysByIno.get(st.ino);
        if (!k && st.size > 0) return undefined;
        entries.push({ p, t: "f", s: st.size, ...(k ? { k } : {}), ...meta(st) });
      }
    }
  }
  return { v: 1, config, entries };
}

/** Parses an index from a peer: its shape, every path a plain relative one, every key a content key. */
export function parseIndex(raw: Buffer): TreeIndex {
  const idx = TreeIndex.parse(JSON.parse(raw.toString("utf8")));
  const dirs = new Set([""]);
  for (const e of idx.entries) {
    if (e.p === "") continue;
    const parts = e.p.split("/");
    if (parts.some((x) => x === "" || x === "." || x === "..")) throw new Error(`bad path in index: ${e.p}`);
    if (!dirs.has(parts.slice(0, -1).join("/"))) throw new Error(`index lists ${e.p} before its folder`);
    if (e.t === "d") dirs.add(e.p);
    if (e.k !== undefined && !metaOfKey(e.k)) throw new Error(`bad content key in index for ${e.p}`);
  }
  return idx;
}

/** Content keys of the index, each once, largest first (a fill makes the most progress early). */
export function keysOf(idx: TreeIndex): Array<{ key: string; size: number }> {
  const seen = new Map<string, number>();
  for (const e of idx.entries) if (e.k) seen.set(e.k, e.s);
  return [...seen].map(([key, size]) => ({ key, size })).sort((a, b) => b.size - a.size);
}
