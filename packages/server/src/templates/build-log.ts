import type { BuildState } from "@aenv/protocol";
import type { BuildLogsQuery } from "@aenv/protocol/rest";

export interface LogEntry {
  timestamp: string;
  level: "debug" | "info" | "warn" | "error";
  message: string;
  step?: string;
}

/** One build's progress: what GET …/builds/{buildID}/status reports. */
export interface BuildRecord {
  templateID: string;
  buildID: string;
  status: BuildState;
  logs: LogEntry[];
  reason?: { message: string; step?: string };
  startedAt: string;
  finishedAt?: string;
}

const MAX_LINE = 4096;
const MAX_ENTRIES = 20_000;
/** A build that prints more than this keeps only the start of its log (records are kept in memory and on disk). */
const MAX_LOG_BYTES = 4 * 1024 * 1024;
const logBytes = new WeakMap<BuildRecord, number>();

/** Turns process output chunks into one log entry per line. */
export class LineSplitter {
  private partial = "";
  constructor(private readonly emit: (line: string) => void) {}
  push(text: string): void {
    const parts = (this.partial + text).split("\n");
    this.partial = parts.pop() ?? "";
    for (const p of parts) this.emit(p.replace(/\r$/, ""));
    if (this.partial.length > MAX_LINE) {
      this.emit(this.partial);
      this.partial = "";
    }
  }
  flush(): void {
    if (this.partial) this.emit(this.partial);
    this.partial = "";
  }
}

export function appendLog(b: BuildRecord, level: LogEntry["level"], message: string, step?: string): void {
  if (b.logs.length >= MAX_ENTRIES) return;
  const used = logBytes.get(b) ?? b.logs.reduce((n, e) => n + e.message.length, 0);
  if (used >= MAX_LOG_BYTES) return;
  let text = message.slice(0, MAX_LINE);
  if (used + text.length >= MAX_LOG_BYTES || b.logs.length === MAX_ENTRIES - 1) {
    text = `build log truncated: over ${MAX_LOG_BYTES} bytes or ${MAX_ENTRIES} lines`;
    level = "warn";
    logBytes.set(b, MAX_LOG_BYTES);
  } else logBytes.set(b, used + text.length);
  const entry: LogEntry = { timestamp: new Date().toISOString(), level, message: text };
  if (step !== undefined) entry.step = step;
  b.logs.push(entry);
}

const RANK: Record<LogEntry["level"], number> = { debug: 0, info: 1, warn: 2, error: 3 };

/**
 * A build's log as E2B's logs API asks for it: entries at `level` or above; forward, from
 * `cursor` (Unix ms) on, oldest first; backward, up to `cursor`, newest first; `limit` at most.
 */
export function selectBuildLogs(
  entries: readonly LogEntry[],
  q: Pick<BuildLogsQuery, "cursor" | "limit" | "direction" | "level">,
): LogEntry[] {
  const min = q.level ? RANK[q.level] : 0;
  const forward = q.direction === "forward";
  const inRange = (e: LogEntry) => {
    if (q.cursor === undefined) return true;
    const ms = Date.parse(e.timestamp);
    return forward ? ms >= q.cursor : ms <= q.cursor;
  };
  const out: LogEntry[] = [];
  // Entries are appended in time order: walk from the end the direction starts at.
  for (let k = 0; k < entries.length && out.length < q.limit; k++) {
    const e = entries[forward ? k : entries.length - 1 - k] as LogEntry;
    if (RANK[e.level] >= min && inRange(e)) out.push(e);
  }
  return out;
}
