/** Parsing of single settings (sizes, flags, numbers, HOST:PORT) and the error bad ones raise. */

/** Bad configuration; the message is one line meant to be printed as is. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

export function parseListen(s: string): { host: string; port: number } {
  const m = /^(.*):(\d+)$/.exec(s);
  if (!m) throw new ConfigError(`--listen expects HOST:PORT, got "${s}"`);
  const port = Number(m[2]);
  if (port < 0 || port > 65535) throw new ConfigError(`bad port in --listen ${s}`);
  return { host: (m[1] ?? "").replace(/^\[|\]$/g, "") || "0.0.0.0", port };
}

const UNITS: Record<string, number> = {
  "": 1,
  b: 1,
  k: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  t: 1024 ** 4,
  tib: 1024 ** 4,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
};

/** "10GiB", "500MB", "512M" (binary), "1073741824" → bytes. */
export function parseBytes(v: string | number, what: string): number {
  if (typeof v === "number" && Number.isInteger(v) && v >= 0) return v;
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(String(v));
  const unit = UNITS[(m?.[2] ?? "").toLowerCase()];
  if (!m || unit === undefined) throw new ConfigError(`${what}: expected a size like 10GiB or 500MB, got "${v}"`);
  return Math.floor(Number(m[1]) * unit);
}

export function parseBool(v: string, what: string): boolean {
  if (/^(1|true|yes|on)$/i.test(v)) return true;
  if (/^(0|false|no|off)$/i.test(v)) return false;
  throw new ConfigError(`${what}: expected true or false, got "${v}"`);
}

export function parseInt10(v: string, what: string): number {
  if (!/^\d+$/.test(v.trim())) throw new ConfigError(`${what}: expected a whole number, got "${v}"`);
  return Number(v);
}
