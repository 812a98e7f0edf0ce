/** Registry credentials (docker-style config files) and the 401 challenge dance (Bearer tokens, Basic). */
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { Response } from "undici";
import { ImagePullError } from "./errors.js";
import type { RegistryNet } from "./registry-net.js";

export interface Credentials {
  username: string;
  password: string;
}

/** Which file to read: explicit option, then REGISTRY_AUTH_FILE, then DOCKER_CONFIG, then ~/.docker. */
export function authFilePath(explicit?: string, env: NodeJS.ProcessEnv = process.env): string {
  if (explicit) return explicit;
  if (env.REGISTRY_AUTH_FILE) return env.REGISTRY_AUTH_FILE;
  if (env.DOCKER_CONFIG) return join(env.DOCKER_CONFIG, "config.json");
  return join(homedir(), ".docker", "config.json");
}

/** `https://index.docker.io/v1/` and friends → `docker.io`; `https://host:5000/x` → `host:5000`. */
function normaliseAuthKey(key: string): string {
  const host = key
    .replace(/^[a-z]+:\/\//i, "")
    .split("/")[0]!
    .toLowerCase();
  return host === "index.docker.io" || host === "registry-1.docker.io" ? "docker.io" : host;
}

/** Reads `auths.<host>.auth` (base64 user:pass) or `username`/`password`; a missing file means no credentials. */
export function loadCredentials(path: string): Map<string, Credentials> {
  const out = new Map<string, Credentials>();
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return out;
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new ImagePullError("unauthorized", `registry auth file ${path} is not valid JSON`, { cause: e });
  }
  const auths = (doc as { auths?: Record<string, { auth?: string; username?: string; password?: string }> }).auths;
  if (!auths || typeof auths !== "object") return out;
  for (const [key, v] of Object.entries(auths)) {
    if (!v || typeof v !== "object") continue;
    let creds: Credentials | undefined;
    if (typeof v.auth === "string" && v.auth) {
      const plain = Buffer.from(v.auth, "base64").toString("utf8");
      const i = plain.indexOf(":");
      if (i > 0) creds = { username: plain.slice(0, i), password: plain.slice(i + 1) };
    } else if (typeof v.username === "string" && typeof v.password === "string") {
      creds = { username: v.username, password: v.password };
    }
    if (creds) out.set(normaliseAuthKey(key), creds);
  }
  return out;
}

export interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

/** Parses `Bearer realm="…",service="…",scope="…"` (quoted or token values). */
export function parseChallenge(header: string): Challenge | undefined {
  const m = /^\s*([A-Za-z]+)\s*(.*)$/.exec(header);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  const re = /([A-Za-z_]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?/g;
  for (let p = re.exec(m[2]!); p; p = re.exec(m[2]!)) {
    params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, "$1") : (p[3] ?? "");
  }
  return { scheme: m[1]!.toLowerCase(), params };
}

export const basicHeader = (c: Credentials) =>
  `Basic ${Buffer.from(`${c.username}:${c.password}`, "utf8").toString("base64")}`;

/**
 * Holds the Authorization header for one registry host. On a 401 it answers the challenge
 * (fetching a Bearer token from the realm, with Basic credentials when known) and says whether
 * a retry is worth it.
 */
export class RegistryAuth {
  private header: string | undefined;
  private lastChallenge = "";

  constructor(
    private readonly host: string,
    private readonly credentials: Credentials | undefined,
    private readonly defaultScope: string,
    /** The realm is the registry's to name: it is reached under the same rules as the registry. */
    private readonly net: RegistryNet,
  ) {}

  authorization(): string | undefined {
    return this.header;
  }

  /** Returns true when a fresh Authorization header was obtained and the request should be retried. */
  async onUnauthorized(wwwAuthenticate: string | null): Promise<boolean> {
    const ch = wwwAuthenticate ? parseChallenge(wwwAuthenticate) : undefined;
    // The same challenge twice with credentials already sent means they were refused.
    const key = `${wwwAuthenticate ?? ""}`;
    if (this.header && key === this.lastChallenge) return false;
    this.lastChallenge = key;
    if (!ch || ch.scheme === "basic") {
      if (!this.credentials) return false;
      this.header = basicHeader(this.credentials);
      return true;
    }
    if (ch.scheme !== "bearer") {
      throw new ImagePullError("unauthorized", `unsupported auth scheme ${ch.scheme} from ${this.host}`);
    }
    const realm = ch.params.realm;
    if (!realm) throw new ImagePullError("unauthorized", `Bearer challenge without realm from ${this.host}`);
    let url: URL;
    try {
      url = new URL(realm);
    } catch {
      throw new ImagePullError("unauthorized", `Bearer challenge from ${this.host} with a bad realm`);
    }
    if (ch.params.service) url.searchParams.set("service", ch.params.service);
    url.searchParams.set("scope", ch.params.scope ?? this.defaultScope);
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.credentials) headers.authorization = basicHeader(this.credentials);
    let res: Response;
    try {
      res = await this.net.fetch(url, { headers, signal: AbortSignal.timeout(30_000) });
    } catch (e) {
      if (e instanceof ImagePullError) throw e;
      throw new ImagePullError("network", `token request to ${url.origin} failed: ${(e as Error).message}`, {
        cause: e,
      });
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new ImagePullError(
        "unauthorized",
        `unauthorized: token server ${url.origin} answered ${res.status} for ${this.host}${this.credentials ? "" : " (no credentials configured)"}`,
      );
    }
    const body = (await res.json()) as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    if (!token) throw new ImagePullError("unauthorized", `token server ${url.origin} returned no token`);
    this.header = `Bearer ${token}`;
    return true;
  }
}
