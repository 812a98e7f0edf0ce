import type { BuildStatus } from "./catalog.js";

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
  status: BuildStatus;
  logs: LogEntry[];
  reason?: { message: string; step?: string };
  startedAt: string;
  finishedAt?: string;
}

const MAX_LINE = 4096;
const MAX_ENTRIES = 20_000;

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
  const entry: LogEntry = { timestamp: new Date().toISOString(), level, message: message.slice(0, MAX_LINE) };
  if (step !== undefined) entry.step = step;
  b.logs.push(entry);
}
