import { CliError } from "./errors.js";

/** Commander collector for repeatable `K=V` options. */
export function collectKeyValue(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const i = value.indexOf("=");
  if (i <= 0) throw new CliError(`invalid '${value}': expected KEY=VALUE`);
  return { ...previous, [value.slice(0, i)]: value.slice(i + 1) };
}

export function parsePositiveInt(name: string, max?: number): (v: string) => number {
  return (v: string) => {
    if (!/^\d+$/.test(v.trim())) throw new CliError(`${name} must be a positive integer, got '${v}'`);
    const n = Number(v);
    if (n < 1 || (max !== undefined && n > max))
      throw new CliError(`${name} must be between 1 and ${max ?? "∞"}, got ${n}`);
    return n;
  };
}

export function parseState(v: string): "running" | "paused" {
  if (v !== "running" && v !== "paused") throw new CliError(`--state must be 'running' or 'paused', got '${v}'`);
  return v;
}

/** `metadata` query value as the server (and SDK) expect: url-encoded `k=v&k2=v2`. */
export function metadataQuery(m: Record<string, string>): string {
  return Object.entries(m)
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join("&");
}

/** `exec ID -- a b c` → "a b c" (arguments are joined with spaces, as a shell line). */
export function joinCommand(args: string[]): string {
  const cmd = args.join(" ").trim();
  if (!cmd) throw new CliError("missing command: aenv exec ID -- CMD...");
  return cmd;
}
