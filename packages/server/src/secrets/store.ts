import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ConflictError, InvalidRequestError, NotFoundError } from "@aenv/edge/errors";
import type { SecretInfo } from "@aenv/protocol";
import { SECRET_VALUE_CHARS } from "@aenv/protocol/rest";
import { writePrivateFile } from "../util/private-file.js";
import { hostAllowed, normaliseAllowedHosts } from "./binding.js";

interface SecretRecord {
  id: string;
  name: string;
  /** Write-only: kept for the runtime, never returned, never logged. */
  value: string;
  version: number;
  metadata: Record<string, string>;
  /**
   * The hosts the value may be sent to. Secrets stored before bindings existed have none and
   * are sent nowhere until they get a new value with a binding.
   */
  allowedHosts?: string[];
  createdAt: number;
  updatedAt: number;
  /** The API key that made it (absent: the operator's): only its sandboxes are sent its value. */
  owner?: string;
}

/**
 * Whose secrets a call sees: one owner's (absent: the operator's), and with `all` (the
 * operator's API calls) every secret, an owner's own name first.
 */
export interface SecretScope {
  owner?: string;
  all?: boolean;
}

/** What the egress proxy gets for a placeholder: the value, or why it may not have it. */
export type SecretUse = { value: string } | { refused: "missing" | "unbound" | "host" | "invalid"; message: string };

/**
 * Project secrets in one file only root can read (DATA/secrets/secrets.json, 0600 in a 0700
 * folder), rewritten atomically on every change. Values never leave this class: every answer
 * is `info()`, which has no value field; `use` serves only the egress proxy, which fills
 * `${e2b.secrets.NAME}` placeholders of network rules into outbound requests, and only for a
 * host the secret is bound to.
 */
export class SecretStore {
  private readonly byId = new Map<string, SecretRecord>();
  private readonly file: string;

  constructor(dir: string) {
    this.file = join(dir, "secrets.json");
    if (existsSync(this.file)) {
      for (const rec of JSON.parse(readFileSync(this.file, "utf8")) as SecretRecord[]) this.byId.set(rec.id, rec);
    }
  }

  private save(): void {
    writePrivateFile(this.file, JSON.stringify([...this.byId.values()]));
  }

  /** By ID or (case-insensitive) name, as the SDK selects them, among the secrets `scope` sees. */
  private find(ref: string, scope: SecretScope): SecretRecord | undefined {
    const mine = (rec: SecretRecord) => rec.owner === scope.owner;
    const byId = this.byId.get(ref);
    if (byId && (scope.all || mine(byId))) return byId;
    const name = ref.toLowerCase();
    const named = [...this.byId.values()].filter((rec) => rec.name === name);
    return named.find(mine) ?? (scope.all ? named[0] : undefined);
  }

  /**
   * A secret's current value for a request to `host`, for the egress proxy only. Checked again
   * here, whatever the rules said when they were set: a rule may name a secret made later, and
   * a value stored before values were validated may not be a valid header value.
   */
  use(name: string, host: string, owner: string | undefined): SecretUse {
    const rec = this.find(name, { owner });
    if (!rec) return { refused: "missing", message: `secret '${name}' named by a network rule does not exist` };
    const allowed = rec.allowedHosts ?? [];
    if (allowed.length === 0) {
      return { refused: "unbound", message: `secret '${rec.name}' is not bound to any host (allowedHosts)` };
    }
    if (!hostAllowed(allowed, host)) {
      return { refused: "host", message: `secret '${rec.name}' may not be sent to ${host}` };
    }
    if (!SECRET_VALUE_CHARS.test(rec.value)) {
      return { refused: "invalid", message: `secret '${rec.name}' is not a valid header value; give it a new value` };
    }
    return { value: rec.value };
  }

  /** A secret's name and binding (no value), for checking network rules when they are set. */
  bindingOf(ref: string, owner: string | undefined): { name: string; allowedHosts: string[] } | undefined {
    const rec = this.find(ref, { owner });
    return rec ? { name: rec.name, allowedHosts: [...(rec.allowedHosts ?? [])] } : undefined;
  }

  private mustFind(ref: string, scope: SecretScope): SecretRecord {
    const rec = this.find(ref, scope);
    if (!rec) throw new NotFoundError(`secret '${ref}' not found`);
    return rec;
  }

  create(
    name: string,
    value: string,
    metadata: Record<string, string> = {},
    allowedHosts: string[] | undefined,
    owner: string | undefined,
  ): SecretInfo {
    checkValue(value);
    const canonical = name.toLowerCase();
    const hosts = allowedHosts ? normaliseAllowedHosts(allowedHosts) : undefined;
    // Names are each owner's own: another key's secret of this name is neither seen nor in the way.
    if (this.find(canonical, { owner })) throw new ConflictError(`secret '${canonical}' already exists`);
    const now = Date.now();
    const rec: SecretRecord = {
      id: `sec_${randomBytes(12).toString("hex")}`,
      name: canonical,
      value,
      version: 1,
      metadata,
      ...(hosts ? { allowedHosts: hosts } : {}),
      createdAt: now,
      updatedAt: now,
      ...(owner ? { owner } : {}),
    };
    this.byId.set(rec.id, rec);
    this.save();
    return info(rec);
  }

  /** A new binding comes only with a new value, so no binding ever redirects the old one. */
  update(
    ref: string,
    scope: SecretScope,
    value: string,
    metadata?: Record<string, string>,
    allowedHosts?: string[],
  ): SecretInfo {
    checkValue(value);
    const hosts = allowedHosts ? normaliseAllowedHosts(allowedHosts) : undefined;
    const rec = this.mustFind(ref, scope);
    rec.value = value;
    rec.version += 1;
    if (metadata) rec.metadata = metadata;
    if (hosts) rec.allowedHosts = hosts;
    rec.updatedAt = Date.now();
    this.save();
    return info(rec);
  }

  get(ref: string, scope: SecretScope): SecretInfo {
    return info(this.mustFind(ref, scope));
  }

  list(scope: SecretScope): SecretInfo[] {
    return [...this.byId.values()]
      .filter((rec) => scope.all || rec.owner === scope.owner)
      .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
      .map(info);
  }

  delete(ref: string, scope: SecretScope): void {
    const rec = this.mustFind(ref, scope);
    this.byId.delete(rec.id);
    this.save();
  }
}

/** The API checks values too (@aenv/protocol); this keeps every other caller to the same rule. */
function checkValue(value: string): void {
  if (value.length === 0 || value.length > 65_536 || !SECRET_VALUE_CHARS.test(value)) {
    throw new InvalidRequestError("a secret value is sent in an HTTP header: printable ASCII, spaces and tabs only");
  }
}

/** The only shape a secret leaves the store in: metadata, no value. */
function info(rec: SecretRecord): SecretInfo {
  return {
    secretID: rec.id,
    name: rec.name,
    currentVersion: rec.version,
    metadata: { ...rec.metadata },
    allowedHosts: [...(rec.allowedHosts ?? [])],
    createdAt: new Date(rec.createdAt).toISOString(),
    updatedAt: new Date(rec.updatedAt).toISOString(),
  };
}
