/**
 * Answers that are costly to compute and change only with what they were computed from,
 * remembered in a small JSON file `{ key, value }`. Not durable: a missing, torn or foreign
 * file just means "not remembered", and the caller computes again.
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

/** The value remembered for `key`, or undefined. */
export function readMemo(file: string, key: string): string | undefined {
  try {
    const v = JSON.parse(readFileSync(file, "utf8")) as { key?: unknown; value?: unknown };
    return v.key === key && typeof v.value === "string" ? v.value : undefined;
  } catch {
    return undefined;
  }
}

/** Remembers one value (the file holds only the latest key); a failure is ignored. */
export function writeMemo(file: string, key: string, value: string): void {
  try {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    const tmp = `${file}.tmp-${process.pid}`;
    writeFileSync(tmp, JSON.stringify({ key, value }), { mode: 0o600 });
    renameSync(tmp, file);
  } catch {
    // Remembered or not, the answer stands.
  }
}
