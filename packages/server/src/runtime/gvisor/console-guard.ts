import { appendFileSync, statSync, truncateSync } from "node:fs";
import type { Logger } from "pino";

/**
 * A sandbox's console is a host file: `runsc run/restore --detach` hand their stdio to the
 * sandbox, and root inside can write to /proc/1/fd/1 without end (50 MB/s here), which lands
 * outside its disk limit, in the data dir. It cannot be a pipe (a reader gone with the server
 * would kill the sentry on its next write), so the file is bounded instead: checked every
 * second, and emptied with a marker line once it passes the limit (writers append, so they go
 * on at the new end). What a sandbox can put on the host disk this way is the limit plus one
 * second of writing.
 */
export class ConsoleGuard {
  private readonly files = new Map<string, string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly maxBytes: number,
    private readonly log: Logger,
    private readonly everyMs = 1000,
  ) {}

  watch(id: string, file: string): void {
    if (this.maxBytes <= 0) return;
    this.files.set(id, file);
    if (!this.timer) {
      this.timer = setInterval(() => this.check(), this.everyMs);
      this.timer.unref();
    }
  }

  forget(id: string): void {
    this.files.delete(id);
    if (this.files.size === 0 && this.timer) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  /** One pass over every watched console (exposed for tests). */
  check(): void {
    for (const [id, file] of this.files) {
      let size: number;
      try {
        size = statSync(file).size;
      } catch {
        continue; // not there yet, or gone with its sandbox
      }
      if (size <= this.maxBytes) continue;
      try {
        truncateSync(file, 0);
        appendFileSync(file, `aenv: console output over ${this.maxBytes} bytes; earlier output dropped\n`);
        this.log.warn({ runtimeId: id, bytes: size }, "sandbox console over its limit; emptied");
      } catch (err) {
        this.log.warn({ err, runtimeId: id }, "sandbox console could not be emptied");
      }
    }
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.files.clear();
  }
}
