/**
 * Answers that are costly to compute and change only with what they were computed from,
 * remembered in a small JSON file `{ entries: { key: value } }`, the newest few keys (servers on
 * one host may ask different questions of the same file). Not durable: a missing, torn or
 * foreign file, or a key lost to another server's write at the same moment, just means "not
 * remembered", and the caller computes again.
 */
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

/**
 * A file as the filesystem describes it (device, inode, size, modification and change times):
 * any write to it changes its ctime, so an unchanged identity means unchanged bytes, as make
 * and git's index assume. Throws where the file is missing.
 */
export function fileIdentity(path: string): string {
  const st = statSync(path, { bigint: true });
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
}

/** Keys kept: the newest. */
const MAX_ENTRIES = 16;

function entries(file: string): Map<string, string> {
  try {
    const v = JSON.parse(readFileSync(file, "utf8")) as { entries?: unknown };
    const out = new Map<string, string>();
    if (v.entries && typeof v.entries === "object") {
      for (const [k, val] of Object.entries(v.entries)) if (typeof val === "string") out.set(k, val);
    }
    return out;
  } catch {
    return new Map();
  }
}

/** The value remembered for `key`, or undefined. */
export function readMemo(file: string, key: string): string | undefined {
  return entries(file).get(key);
}

/** Remembers one value beside the newest others; a failure is ignored. */
export function writeMemo(file: string, key: string, value: string): void {
  try {
    const all = entries(file);
    all.delete(key);
    all.set(key, value);
    const kept = [...all].slice(-MAX_ENTRIES);
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    const tmp = `${file}.tmp-${process.pid}`;
    writeFileSync(tmp, JSON.stringify({ entries: Object.fromEntries(kept) }), { mode: 0o600 });
    renameSync(tmp, file);
  } catch {
    // Remembered or not, the answer stands.
  }
}
