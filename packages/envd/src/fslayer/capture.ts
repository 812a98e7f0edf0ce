/**
 * Taking a sandbox's writable filesystem layer: `/` compared with the template tree bound
 * read-only at SANDBOX_LOWER_DIR. gVisor's overlay gives a file copied up to its writable
 * layer a new ctime and leaves the lower file's ctime on everything else, so an entry whose
 * ctime matches the lower one is unchanged, and so is everything under such a directory
 * (a change anywhere copies up every ancestor): only copied-up directories are walked.
 */
import {
  type BigIntStats,
  closeSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
} from "node:fs";
import path from "node:path";
import type { EnvdLayerStats } from "@aenv/protocol";
import {
  END_OF_ARCHIVE,
  encodeHeader,
  type LayerEntryType,
  type LayerHeader,
  padding,
  WHITEOUT_PREFIX,
} from "./tar.js";

/** Never part of a layer: kernel and runtime filesystems, and envd's own mounts. */
const SKIPPED = ["proc", "sys", "dev", ".aenv"];

interface Mounts {
  /** Mount points (relative to /) whose contents are not the sandbox's files: skipped. */
  skip: Set<string>;
  /** tmpfs mounts gVisor adds (/tmp): taken whole, they hide the lower tree in every boot. */
  whole: Set<string>;
}

const unescapeOctal = (s: string) =>
  s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));

/** The sandbox's mounts from /proc/self/mountinfo, sorted into skipped and taken whole. */
export function parseMounts(mountinfo: string): Mounts {
  const m: Mounts = { skip: new Set(), whole: new Set() };
  for (const line of mountinfo.split("\n")) {
    const [left, right] = line.split(" - ");
    const point = left?.split(" ")[4];
    const fstype = right?.split(" ")[0];
    if (!point || !fstype || point === "/") continue;
    const rel = unescapeOctal(point).replace(/^\/+/, "");
    (fstype === "tmpfs" ? m.whole : m.skip).add(rel);
  }
  return m;
}

function typeOf(st: BigIntStats): LayerEntryType | undefined {
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "dir";
  if (st.isSymbolicLink()) return "symlink";
  // Sockets, fifos and devices have no contents worth keeping (a boot makes its own).
  return undefined;
}

/** Not copied up: same ctime (and, for good measure, the same visible metadata). */
function sameEntry(a: BigIntStats, b: BigIntStats): boolean {
  return (
    a.ctimeNs === b.ctimeNs &&
    a.mtimeNs === b.mtimeNs &&
    a.mode === b.mode &&
    a.uid === b.uid &&
    a.gid === b.gid &&
    (a.isDirectory() || a.size === b.size)
  );
}

/** The OCI whiteout entry that deletes `name` in folder `rel` (an empty file `.wh.<name>`). */
function whiteout(rel: string, name: string): Buffer {
  const base = `${WHITEOUT_PREFIX}${name}`;
  return encodeHeader({
    path: rel ? `${rel}/${base}` : base,
    type: "file",
    mode: 0o600,
    uid: 0,
    gid: 0,
    size: 0,
    mtime: 0,
    linkname: "",
  });
}

function lstatOrUndefined(p: string): BigIntStats | undefined {
  try {
    return lstatSync(p, { bigint: true });
  } catch {
    return undefined;
  }
}

function listOrEmpty(p: string): string[] {
  try {
    return readdirSync(p);
  } catch {
    return [];
  }
}

/** Many small records in few writes: each write into the sandbox's network costs a syscall or more. */
function* batched(src: Iterable<Buffer>, size = 256 * 1024): Generator<Buffer> {
  let parts: Buffer[] = [];
  let n = 0;
  for (const b of src) {
    parts.push(b);
    n += b.length;
    if (n >= size) {
      yield parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, n);
      parts = [];
      n = 0;
    }
  }
  if (n) yield Buffer.concat(parts, n);
}

/**
 * Streams the layer as tar blocks; `stats` is filled in as it goes. Synchronous on purpose:
 * the sandbox's other processes are stopped meanwhile, and a thread-pool hop per file system
 * call costs more than the call itself under gVisor.
 */
export function captureLayer(
  opts: { root?: string; lower: string; mountinfo?: string },
  stats: EnvdLayerStats,
): Generator<Buffer> {
  return batched(walkLayer(opts, stats));
}

function readMountinfo(): string {
  try {
    return readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return "";
  }
}

function* walkLayer(
  opts: { root?: string; lower: string; mountinfo?: string },
  stats: EnvdLayerStats,
): Generator<Buffer> {
  const root = opts.root ?? "/";
  const mounts = parseMounts(opts.mountinfo ?? readMountinfo());
  const lowerRel = path.relative(root, opts.lower);
  const skipped = (rel: string) =>
    SKIPPED.some((s) => rel === s || rel.startsWith(`${s}/`)) ||
    mounts.skip.has(rel) ||
    rel === lowerRel ||
    rel.startsWith(`${lowerRel}/`);
  /** First path of each multiply-linked file, by inode: later names become hard links. */
  const links = new Map<string, string>();

  function* entry(rel: string, st: BigIntStats): Generator<Buffer> {
    const type = typeOf(st);
    if (!type) return;
    const abs = path.join(root, rel);
    const h: LayerHeader = {
      path: rel,
      type,
      mode: Number(st.mode) & 0o7777,
      uid: Number(st.uid),
      gid: Number(st.gid),
      size: 0,
      mtime: Number(st.mtimeMs / 1000n),
      linkname: "",
    };
    if (type === "symlink") h.linkname = readlinkSync(abs);
    if (type === "file" && st.nlink > 1n) {
      const key = `${st.dev}:${st.ino}`;
      const first = links.get(key);
      if (first !== undefined) {
        stats.entries++;
        yield encodeHeader({ ...h, type: "hardlink", linkname: first });
        return;
      }
      links.set(key, rel);
    }
    if (type !== "file") {
      stats.entries++;
      yield encodeHeader(h);
      return;
    }
    h.size = Number(st.size);
    stats.entries++;
    stats.bytes += h.size;
    yield encodeHeader(h);
    // Exactly the size announced: a file that shrank meanwhile is padded, one that grew cut.
    let fd: number | undefined;
    try {
      fd = openSync(abs, "r");
    } catch {
      // Gone or unreadable meanwhile: zeros of the announced size.
    }
    let left = h.size;
    try {
      while (left > 0 && fd !== undefined) {
        const buf = Buffer.allocUnsafe(Math.min(left, 1 << 20));
        const bytesRead = readSync(fd, buf, 0, buf.length, h.size - left);
        if (bytesRead === 0) break;
        left -= bytesRead;
        yield buf.subarray(0, bytesRead);
      }
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
    if (left > 0) yield Buffer.alloc(left);
    yield Buffer.alloc(padding(h.size));
  }

  /** A directory of the writable layer: its deletions, then what changed in it. */
  function* dir(rel: string, whole: boolean): Generator<Buffer> {
    const abs = path.join(root, rel);
    const names = listOrEmpty(abs);
    names.sort();
    if (!whole) {
      const here = new Set(names);
      for (const name of listOrEmpty(path.join(opts.lower, rel)).sort()) {
        const child = rel ? `${rel}/${name}` : name;
        if (here.has(name) || skipped(child)) continue;
        stats.whiteouts++;
        yield whiteout(rel, name);
      }
    }
    for (const name of names) {
      const child = rel ? `${rel}/${name}` : name;
      if (skipped(child)) continue;
      const st = lstatOrUndefined(path.join(root, child));
      if (!st) continue; // gone meanwhile
      const takeWhole = whole || mounts.whole.has(child);
      const lower = takeWhole ? undefined : lstatOrUndefined(path.join(opts.lower, child));
      const unchanged = lower && sameEntry(lower, st);
      if (unchanged) continue;
      if (lower && typeOf(lower) !== typeOf(st)) {
        // A file that became a directory (or the reverse): the lower one goes first.
        stats.whiteouts++;
        yield whiteout(rel, name);
      }
      yield* entry(child, st);
      if (st.isDirectory()) yield* dir(child, takeWhole);
    }
  }

  yield* dir("", false);
  yield END_OF_ARCHIVE;
}
