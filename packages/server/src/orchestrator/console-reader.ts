/**
 * Reads a sandbox's console file for its logs API without ever taking the whole file: the
 * sandbox writes that file (root inside can fill it to its cap, 8 MiB of one-byte lines, in a
 * fraction of a second), and a call that split and parsed all of it held the server's event
 * loop for seconds and hundreds of MiB. A call reads one region of at most REGION bytes:
 * backward, the region that ends at the end of the file (or at the cursor); forward, the one
 * that starts at the file's start (or at the cursor). The cursor (a time) is found by binary
 * search over envd's stamps, a few small reads. What lies past one region is left for the next
 * call, paged by its cursor.
 */
import { type FileHandle, open } from "node:fs/promises";
import { type ConsoleEntry, consoleEntry, type LogsFilter, matchesFilter, stampOf } from "./sandbox-logs.js";

/** What one call reads of the console, at most. */
export const REGION = 256 << 10;
/** One probe of the cursor search, and how far back a region looks for the stamp its first lines take. */
const PROBE = 16 << 10;
/** How far back a cursor probe looks for the stamp in force. */
const LOOK_BACK = 128 << 10;

interface Region {
  /** Lines of the region, whole (a line cut by its edge is dropped). */
  lines: string[];
  /** The stamp in force at the region's first line (the last one before it), if any was found. */
  before?: number;
}

async function readAt(fh: FileHandle, pos: number, len: number): Promise<string> {
  const buf = Buffer.alloc(Math.max(0, len));
  const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
  return buf.subarray(0, bytesRead).toString("utf8");
}

/** The first stamp at or after byte `pos` within one probe (a partial first line skipped). */
async function stampAfter(fh: FileHandle, pos: number): Promise<number | undefined> {
  const text = await readAt(fh, pos, PROBE);
  const lines = text.split("\n");
  if (pos > 0) lines.shift();
  lines.pop(); // cut by the probe's end
  for (const l of lines) {
    const t = stampOf(l);
    if (t) return t.ms;
  }
  return undefined;
}

/**
 * The byte offset from which lines are stamped (or take a stamp) at or after `ms`, give or take
 * a probe: envd stamps in order. A probe asks the stamp in force at its offset (the last one
 * before it, else the next one after it); one that finds neither, deep in a run of unstamped
 * lines, counts as earlier, so the search errs late rather than answering from a region
 * that ends before the cursor.
 */
async function offsetOf(fh: FileHandle, size: number, ms: number): Promise<number> {
  let lo = 0;
  let hi = size;
  while (hi - lo > PROBE) {
    const mid = lo + Math.floor((hi - lo) / 2);
    const t = (await stampBefore(fh, mid, LOOK_BACK)) ?? (await stampAfter(fh, mid));
    if (t === undefined || t < ms) lo = mid;
    else hi = mid;
  }
  return lo;
}

/** The stamp in force at `pos`: the last one in the `within` bytes before it. */
async function stampBefore(fh: FileHandle, pos: number, within = PROBE): Promise<number | undefined> {
  if (pos <= 0) return undefined;
  const from = Math.max(0, pos - within);
  const lines = (await readAt(fh, from, pos - from)).split("\n");
  if (from > 0) lines.shift();
  for (let i = lines.length - 1; i >= 0; i--) {
    const t = stampOf(lines[i] as string);
    if (t) return t.ms;
  }
  return undefined;
}

async function regionAt(fh: FileHandle, start: number, end: number): Promise<Region> {
  const lines = (await readAt(fh, start, end - start)).split("\n");
  // A region that does not start at a line's start drops its partial first line; the text after
  // the last newline is a line still being written, or cut by the region's end.
  if (start > 0) lines.shift();
  lines.pop();
  const before = await stampBefore(fh, start, LOOK_BACK);
  return before === undefined ? { lines } : { lines, before };
}

/**
 * The time of each line of a region: its stamp, else the last stamp before it; lines before
 * the first stamp take that first stamp (else `fallback`, the file's last write). Numbers
 * only: entries are made later for the few lines an answer takes.
 */
function timesOf(lines: string[], before: number | undefined, fallback: number): Float64Array {
  const times = new Float64Array(lines.length);
  let last = before;
  let pendingFrom = last === undefined ? 0 : -1;
  for (let i = 0; i < lines.length; i++) {
    const st = stampOf(lines[i] as string);
    if (st) {
      if (pendingFrom >= 0) times.fill(st.ms, pendingFrom, i);
      pendingFrom = -1;
      last = st.ms;
    }
    times[i] = last ?? fallback;
  }
  return times;
}

/** The matching entries of a region, in the direction asked, `f.limit` at most. */
function pick(r: Region, fallback: number, f: LogsFilter): ConsoleEntry[] {
  const times = timesOf(r.lines, r.before, fallback);
  const out: ConsoleEntry[] = [];
  const n = r.lines.length;
  for (let k = 0; k < n && out.length < f.limit; k++) {
    const i = f.direction === "forward" ? k : n - 1 - k;
    const ms = times[i] as number;
    // The cursor first: it decides most lines of a long region without any work on the text.
    if (f.cursor !== undefined && (f.direction === "forward" ? ms < f.cursor : ms > f.cursor)) continue;
    const raw = r.lines[i] as string;
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.trim() === "") continue;
    const e = consoleEntry(ms, stampOf(line)?.message ?? line);
    if (matchesFilter(e, f)) out.push(e);
  }
  return out;
}

/**
 * Up to `f.limit` console entries that match `f`, in its direction (forward: oldest first),
 * from one region of the file. Undefined when the file cannot be read (no console yet).
 */
export async function readConsole(file: string, f: LogsFilter): Promise<ConsoleEntry[] | undefined> {
  let fh: FileHandle;
  try {
    fh = await open(file, "r");
  } catch {
    return undefined;
  }
  try {
    const st = await fh.stat();
    const size = st.size;
    const fallback = st.mtimeMs;
    if (f.limit === 0 || size === 0) return [];
    let start: number;
    let end: number;
    if (f.direction === "forward") {
      start = f.cursor === undefined ? 0 : await offsetOf(fh, size, f.cursor);
      end = Math.min(size, start + REGION);
    } else {
      end = f.cursor === undefined ? size : Math.min(size, (await offsetOf(fh, size, f.cursor + 1)) + PROBE);
      start = Math.max(0, end - REGION);
    }
    const out = pick(await regionAt(fh, start, end), fallback, f);
    return out;
  } finally {
    await fh.close();
  }
}
