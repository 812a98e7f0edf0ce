/** JSON-lines logger on stderr. Never throws. */
type Level = "debug" | "info" | "warn" | "error";

let debugEnabled = process.env.ENVD_DEBUG === "1";

export function setDebug(on: boolean): void {
  debugEnabled = on;
}

function errorFields(err: unknown): Record<string, unknown> {
  if (err instanceof Error) return { error: err.message, stack: err.stack };
  return { error: String(err) };
}

export function log(level: Level, msg: string, fields?: Record<string, unknown>): void {
  if (level === "debug" && !debugEnabled) return;
  try {
    const rec: Record<string, unknown> = { ts: new Date().toISOString(), level, msg };
    if (fields) {
      for (const [k, v] of Object.entries(fields)) rec[k] = k === "err" ? errorFields(v) : v;
    }
    process.stderr.write(`${JSON.stringify(rec)}\n`);
  } catch {
    // logging must never take the daemon down
  }
}
