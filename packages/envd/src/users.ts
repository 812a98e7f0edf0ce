/** Linux accounts from /etc/passwd and /etc/group of the sandbox root. */
import { promises as fsp } from "node:fs";
import path from "node:path";

export interface User {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

export interface Accounts {
  byName: Map<string, User>;
  byUid: Map<number, User>;
  groupByGid: Map<number, string>;
}

export function parsePasswd(text: string): User[] {
  const out: User[] = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const f = line.split(":");
    if (f.length < 7) continue;
    const uid = Number(f[2]);
    const gid = Number(f[3]);
    if (!f[0] || !Number.isInteger(uid) || !Number.isInteger(gid)) continue;
    out.push({ name: f[0], uid, gid, home: f[5] || "/", shell: f[6] || "/bin/sh" });
  }
  return out;
}

export function parseGroup(text: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const f = line.split(":");
    const gid = Number(f[2]);
    if (f.length < 3 || !f[0] || !Number.isInteger(gid)) continue;
    if (!out.has(gid)) out.set(gid, f[0]);
  }
  return out;
}

const CACHE_MS = 1000;

export class UserDb {
  private cached: Accounts | undefined;
  private cachedAt = 0;
  private loading: Promise<Accounts> | undefined;

  constructor(private readonly etcDir = "/etc") {}

  async accounts(): Promise<Accounts> {
    if (this.cached && Date.now() - this.cachedAt < CACHE_MS) return this.cached;
    this.loading ??= this.load().finally(() => {
      this.loading = undefined;
    });
    return this.loading;
  }

  private async load(): Promise<Accounts> {
    const read = (f: string) => fsp.readFile(path.join(this.etcDir, f), "utf8").catch(() => "");
    const [passwd, group] = await Promise.all([read("passwd"), read("group")]);
    const users = parsePasswd(passwd);
    const byName = new Map<string, User>();
    const byUid = new Map<number, User>();
    for (const u of users) {
      if (!byName.has(u.name)) byName.set(u.name, u);
      if (!byUid.has(u.uid)) byUid.set(u.uid, u);
    }
    // root must always resolve, even with a broken /etc/passwd
    if (!byName.has("root")) {
      const root: User = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/sh" };
      byName.set("root", root);
      if (!byUid.has(0)) byUid.set(0, root);
    }
    const groupByGid = parseGroup(group);
    this.cached = { byName, byUid, groupByGid };
    this.cachedAt = Date.now();
    return this.cached;
  }

  async lookup(name: string): Promise<User | undefined> {
    return (await this.accounts()).byName.get(name);
  }

  /** The configured default user, else `user` if it exists, else `root`. */
  async defaultUserName(configured: string | undefined): Promise<string> {
    if (configured) return configured;
    return (await this.lookup("user")) ? "user" : "root";
  }
}

/** Username from `Authorization: Basic base64("name:")`; undefined when absent or empty. */
export function usernameFromBasicAuth(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const m = /^\s*basic\s+(\S+)\s*$/i.exec(header);
  if (!m?.[1]) return undefined;
  const decoded = Buffer.from(m[1], "base64").toString("utf8");
  const idx = decoded.indexOf(":");
  const name = idx >= 0 ? decoded.slice(0, idx) : decoded;
  return name || undefined;
}
