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

/** envd's stamp on a console line: its time (Unix ms) and the message after it. */
export function stampOf(line: string): { ms: number; message: string } | undefined {
  // Cheap test first: most lines of a full console carry no stamp.
  if (line.length < 20 || line.indexOf("/") < 0) return undefined;
  const m = STAMP.exec(line);
  if (!m) return undefined;
  const n = (i: number) => Number(m[i]);
  const frac = m[7];
  const ms = Date.UTC(n(1), n(2) - 1, n(3), n(4), n(5), n(6), frac ? Math.floor(Number(`0.${frac}`) * 1000) : 0);
  return { ms, message: m[8] ?? "" };
}

/** One console line as an entry (cut to MAX_LINE: a sandbox controls what its console holds). */
export function consoleEntry(ms: number, message: string): ConsoleEntry {
  const cut = message.length > MAX_LINE ? `${message.slice(0, MAX_LINE)}…` : message;
  return { ms, timestamp: new Date(ms).toISOString(), level: levelOf(cut), message: cut, fields: { logger: "envd" } };
}

export interface LogsFilter {
  /** Unix ms: forward, entries at or after it; backward, at or before it. */
  cursor?: number;
  limit: number;
  direction: "forward" | "backward";
  level?: SandboxLogLevel;
  search?: string;
}

/** Whether an entry passes the v2 API's level, search and cursor parameters. */
export function matchesFilter(e: ConsoleEntry, f: LogsFilter): boolean {
  return (
    RANK[e.level] >= (f.level ? RANK[f.level] : 0) &&
    (f.search === undefined || e.message.includes(f.search)) &&
    (f.cursor === undefined || (f.direction === "forward" ? e.ms >= f.cursor : e.ms <= f.cursor))
  );
}

/**
 * What the server logged about a sandbox (all of it, oldest first) merged with its console
 * entries (already filtered, in the direction asked), as the API answers: `f.limit` at most.
 */
export function mergeLogs(book: ConsoleEntry[], console: ConsoleEntry[], f: LogsFilter): SandboxLogEntry[] {
  const own = book.filter((e) => matchesFilter(e, f));
  if (f.direction === "backward") own.reverse();
  const later = (a: ConsoleEntry, b: ConsoleEntry) => (f.direction === "forward" ? a.ms > b.ms : a.ms < b.ms);
  const out: SandboxLogEntry[] = [];
  let i = 0;
  let j = 0;
  while (out.length < f.limit && (i < own.length || j < console.length)) {
    const a = own[i];
    const b = console[j];
    const takeConsole = a === undefined || (b !== undefined && later(a, b));
    const { ms: _ms, ...e } = (takeConsole ? b : a) as ConsoleEntry;
    out.push(e);
    if (takeConsole) j++;
    else i++;
  }
  return out;
}
