import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { CliError } from "./errors.js";

export const DEFAULT_API_URL = "http://127.0.0.1:8000";

export interface Credentials {
  apiUrl: string;
  apiKey: string;
}

export interface ResolvedConfig {
  apiUrl: string;
  apiKey: string | undefined;
}

export function credentialsPath(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME || join(homedir(), ".config");
  return join(base, "aenv", "credentials");
}

export function readCredentials(path = credentialsPath()): Partial<Credentials> {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return {};
  }
  try {
    const j = JSON.parse(text) as Record<string, unknown>;
    return {
      apiUrl: typeof j.apiUrl === "string" ? j.apiUrl : undefined,
      apiKey: typeof j.apiKey === "string" ? j.apiKey : undefined,
    };
  } catch {
    throw new CliError(`${path} is not valid JSON; run 'aenv auth' again`);
  }
}

export function writeCredentials(c: Credentials, path = credentialsPath()): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, `${JSON.stringify(c, null, 2)}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
}

/** Env (AENV_API_URL / AENV_API_KEY) overrides the credentials file; the URL defaults to loopback:8000. */
export function resolveConfig(
  env: NodeJS.ProcessEnv = process.env,
  file: Partial<Credentials> = readCredentials(),
): ResolvedConfig {
  const apiUrl = normalizeUrl(env.AENV_API_URL || file.apiUrl || DEFAULT_API_URL);
  return { apiUrl, apiKey: env.AENV_API_KEY || file.apiKey };
}

export function normalizeUrl(u: string): string {
  const s = u.trim().replace(/\/+$/, "");
  let parsed: URL;
  try {
    parsed = new URL(s);
  } catch {
    throw new CliError(`invalid server URL '${u}'`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw new CliError(`invalid server URL '${u}': expected http(s)://`);
  return s;
}
