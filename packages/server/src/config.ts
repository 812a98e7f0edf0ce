import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface ServerConfig {
  host: string;
  port: number;
  dataDir: string;
  templatesDir: string;
  apiKey: string;
  /** Returned as `domain`; sandbox ports are served at {port}-{id}.{domain}. */
  domain: string;
  slotCidr: string;
  netPrefix: string;
  platform: string;
  runscBinary: string;
  logLevel: string;
  defaultTimeoutS: number;
  maxTimeoutS: number;
  bodyLimitBytes: number;
  warmSlots: number;
  /** Most sandboxes (running or starting) this node runs at once; more get 429. */
  maxSandboxes: number;
}

export interface CliArgs {
  listen?: string;
  dataDir?: string;
  templatesDir?: string;
  domain?: string;
}

export function parseListen(s: string): { host: string; port: number } {
  const m = /^(.*):(\d+)$/.exec(s);
  if (!m) throw new Error(`--listen expects HOST:PORT, got "${s}"`);
  const port = Number(m[2]);
  if (port < 0 || port > 65535) throw new Error(`bad port in --listen ${s}`);
  return { host: (m[1] ?? "").replace(/^\[|\]$/g, "") || "0.0.0.0", port };
}

/** The API key: AENV_API_KEY, else one generated on first start into DATA/secrets/api-key (0600). */
export function resolveApiKey(dataDir: string, env: NodeJS.ProcessEnv): string {
  if (env.AENV_API_KEY) return env.AENV_API_KEY;
  const dir = join(dataDir, "secrets");
  const file = join(dir, "api-key");
  if (existsSync(file)) return readFileSync(file, "utf8").trim();
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const key = `aenv_${randomBytes(24).toString("hex")}`;
  writeFileSync(file, `${key}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return key;
}

export function loadConfig(args: CliArgs, env: NodeJS.ProcessEnv = process.env): ServerConfig {
  const { host, port } = parseListen(args.listen ?? env.AENV_LISTEN ?? "0.0.0.0:8000");
  const dataDir = args.dataDir ?? env.AENV_DATA_DIR ?? "/var/lib/aenv";
  mkdirSync(dataDir, { recursive: true });
  const num = (v: string | undefined, d: number) => (v && Number.isFinite(Number(v)) ? Number(v) : d);
  return {
    host,
    port,
    dataDir,
    templatesDir: args.templatesDir ?? env.AENV_TEMPLATES_DIR ?? join(dataDir, "templates"),
    apiKey: resolveApiKey(dataDir, env),
    domain: args.domain ?? env.AENV_DOMAIN ?? `localhost:${port}`,
    slotCidr: env.AENV_SLOT_CIDR ?? "10.201.0.0/16",
    netPrefix: env.AENV_NET_PREFIX ?? "aenv",
    platform: env.AENV_RUNSC_PLATFORM ?? "auto",
    runscBinary: env.AENV_RUNSC ?? "runsc",
    logLevel: env.AENV_LOG_LEVEL ?? "info",
    defaultTimeoutS: num(env.AENV_DEFAULT_TIMEOUT, 300),
    maxTimeoutS: num(env.AENV_MAX_TIMEOUT, 24 * 3600),
    bodyLimitBytes: num(env.AENV_BODY_LIMIT, 1024 * 1024),
    warmSlots: num(env.AENV_WARM_SLOTS, 4),
    maxSandboxes: num(env.AENV_MAX_SANDBOXES, 256),
  };
}
