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

/** A word for `sh -c`, quoted only when it needs to be. */
export function shellQuote(w: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`;
}

/**
 * What `aenv exec` runs, as `docker exec`/`kubectl exec` users expect: one argument is a shell
 * command line (`'ls | wc -l'`); several are an argv, each word quoted so the shell runs
 * exactly those words (`sh -c 'echo "a  b"'` keeps its two spaces).
 */
export function commandLine(args: string[]): string {
  if (args.length === 0 || (args.length === 1 && !args[0]?.trim())) {
    throw new CliError("missing command: aenv exec ID -- CMD [ARGS...]");
  }
  if (args.length === 1) return args[0] as string;
  return args.map(shellQuote).join(" ");
}
