/**
 * A sandbox's logs in E2B's shape (GET /sandboxes/{id}/logs, /v2/…): what its console holds,
 * that is envd's own log (its warnings and failures) and its init's output, one entry a line,
 * beside what the server logged about the sandbox (sandbox-log-book.ts). envd writes
 * `envd: 2006/01/02 15:04:05.000000`; a line without one takes
 * the time of the line before it (or the file's last write).
 */
import type { SandboxLogEntry, SandboxLogLevel } from "@aenv/protocol";

const STAMP = /^(?:[a-z-]+: )?(\d{4})\/(\d{2})\/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))? (.*)$/;
/** Longer lines are cut: a sandbox controls what its console holds. */
const MAX_LINE = 4096;
const RANK: Record<SandboxLogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

function levelOf(message: string): SandboxLogLevel {
  if (/^warn\b/i.test(message)) return "warn";
  if (/\bpanic\b|\bfailed\b|\berror\b|\bcannot\b/i.test(message)) return "error";
  return "info";
}

/** A log entry with its time as Unix ms, for filtering. */
export type ConsoleEntry = SandboxLogEntry & { ms: number };

/** Console text → entries with their Unix ms times, oldest first. */
export function parseConsole(text: string, modified: Date): ConsoleEntry[] {
  const out: ConsoleEntry[] = [];
  let last: number | undefined;
  const pending: string[] = [];
  const push = (ms: number, message: string) => {
    const cut = message.length > MAX_LINE ? `${message.slice(0, MAX_LINE)}…` : message;
    out.push({
      ms,
      timestamp: new Date(ms).toISOString(),
      level: levelOf(cut),
      message: cut,
      fields: { logger: "envd" },
    });
  };
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\r$/, "");
    if (line.trim() === "") continue;
    const m = STAMP.exec(line);
    if (m) {
      const n = (i: number) => Number(m[i]);
      const frac = m[7];
      last = Date.UTC(n(1), n(2) - 1, n(3), n(4), n(5), n(6), frac ? Math.floor(Number(`0.${frac}`) * 1000) : 0);
      const msg = m[8] ?? "";
      // Lines that came before the first stamped one take its time.
      for (const p of pending.splice(0)) push(last, p);
      push(last, msg);
    } else if (last === undefined) pending.push(line);
    else push(last, line);
  }
  for (const p of pending) push(modified.getTime(), p);
  return out;
}

export interface LogsFilter {
  /** Unix ms: forward, entries at or after it; backward, at or before it. */
  cursor?: number;
  limit: number;
  direction: "forward" | "backward";
  level?: SandboxLogLevel;
  search?: string;
}

/** Entries (oldest first) filtered as the v2 API's parameters say, in the direction asked. */
export function filterLogs(all: ConsoleEntry[], f: LogsFilter): SandboxLogEntry[] {
  const min = f.level ? RANK[f.level] : 0;
  const picked = all.filter(
    (e) =>
      RANK[e.level] >= min &&
      (f.search === undefined || e.message.includes(f.search)) &&
      (f.cursor === undefined || (f.direction === "forward" ? e.ms >= f.cursor : e.ms <= f.cursor)),
  );
  const ordered = f.direction === "forward" ? picked : picked.reverse();
  return ordered.slice(0, f.limit).map(({ ms: _ms, ...e }) => e);
}
