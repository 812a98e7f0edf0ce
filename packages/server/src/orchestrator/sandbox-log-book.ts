import type { SandboxLogLevel } from "@aenv/protocol";
import type { LogFn } from "pino";
import type { ConsoleEntry } from "./sandbox-logs.js";

/** Entries kept per sandbox: its latest, in memory (logs are not state a crash must keep). */
const PER_SANDBOX = 1000;

const levelName = (n: number): SandboxLogLevel => (n >= 50 ? "error" : n >= 40 ? "warn" : n >= 30 ? "info" : "debug");

/**
 * What the server logged about each sandbox (created, paused, resumed, its filesystem layer
 * applied, a failure), kept for its logs API: every log call that names a `sandboxID` is
 * copied here by a pino hook, so no lifecycle module writes sandbox logs of its own.
 */
export class SandboxLogBook {
  private readonly entries = new Map<string, ConsoleEntry[]>();

  add(id: string, level: SandboxLogLevel, message: string, fields: Record<string, string>): void {
    let list = this.entries.get(id);
    if (!list) {
      list = [];
      this.entries.set(id, list);
    }
    const ms = Date.now();
    list.push({ ms, timestamp: new Date(ms).toISOString(), level, message, fields });
    if (list.length > PER_SANDBOX) list.splice(0, list.length - PER_SANDBOX);
  }

  of(id: string): ConsoleEntry[] {
    return this.entries.get(id) ?? [];
  }

  forget(id: string): void {
    this.entries.delete(id);
  }

  /** pino's `hooks.logMethod`: copies calls with a sandboxID, then logs as usual. */
  hook(): (this: unknown, args: Parameters<LogFn>, method: LogFn, level: number) => void {
    const book = this;
    return function (this: unknown, args, method, level) {
      const [first, second] = args as unknown[];
      if (first && typeof first === "object" && typeof (first as { sandboxID?: unknown }).sandboxID === "string") {
        const obj = first as Record<string, unknown>;
        const fields: Record<string, string> = { logger: "aenv" };
        for (const [k, v] of Object.entries(obj)) {
          if (k === "sandboxID" || k === "err") continue;
          if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") fields[k] = String(v);
        }
        const err = obj.err instanceof Error ? `: ${obj.err.message}` : "";
        book.add(
          obj.sandboxID as string,
          levelName(level),
          `${typeof second === "string" ? second : ""}${err}`,
          fields,
        );
      }
      method.apply(this, args);
    };
  }
}
