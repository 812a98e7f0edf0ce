import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { SecretInfo } from "@aenv/protocol";
import { ConflictError, NotFoundError } from "../errors.js";
import { writePrivateFile } from "../util/private-file.js";

interface SecretRecord {
  id: string;
  name: string;
  /** Write-only: kept for the runtime, never returned, never logged. */
  value: string;
  version: number;
  metadata: Record<string, string>;
  createdAt: number;
  updatedAt: number;
}

/**
 * Project secrets in one file only root can read (DATA/secrets/secrets.json, 0600 in a 0700
 * folder), rewritten atomically on every change. Values never leave this class: every answer
 * is `info()`, which has no value field; `valueOf` serves only the egress proxy, which fills
 * `${e2b.secrets.NAME}` placeholders of network rules into outbound requests.
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

  /** By ID or (case-insensitive) name, as the SDK selects them. */
  find(ref: string): SecretRecord | undefined {
    const byId = this.byId.get(ref);
    if (byId) return byId;
    const name = ref.toLowerCase();
    for (const rec of this.byId.values()) if (rec.name === name) return rec;
    return undefined;
  }

  /** A secret's current value by name, for the egress proxy only. */
  valueOf(name: string): string | undefined {
    return this.find(name)?.value;
  }

  private mustFind(ref: string): SecretRecord {
    const rec = this.find(ref);
    if (!rec) throw new NotFoundError(`secret '${ref}' not found`);
    return rec;
  }

  create(name: string, value: string, metadata: Record<string, string> = {}): SecretInfo {
    const canonical = name.toLowerCase();
    if (this.find(canonical)) throw new ConflictError(`secret '${canonical}' already exists`);
    const now = Date.now();
    const rec: SecretRecord = {
      id: `sec_${randomBytes(12).toString("hex")}`,
      name: canonical,
      value,
      version: 1,
      metadata,
      createdAt: now,
      updatedAt: now,
    };
    this.byId.set(rec.id, rec);
    this.save();
    return info(rec);
  }

  update(ref: string, value: string, metadata?: Record<string, string>): SecretInfo {
    const rec = this.mustFind(ref);
    rec.value = value;
    rec.version += 1;
    if (metadata) rec.metadata = metadata;
    rec.updatedAt = Date.now();
    this.save();
    return info(rec);
  }

  get(ref: string): SecretInfo {
    return info(this.mustFind(ref));
  }

  list(): SecretInfo[] {
    return [...this.byId.values()].sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id)).map(info);
  }

  delete(ref: string): void {
    const rec = this.mustFind(ref);
    this.byId.delete(rec.id);
    this.save();
  }
}

/** The only shape a secret leaves the store in: metadata, no value. */
function info(rec: SecretRecord): SecretInfo {
  return {
    secretID: rec.id,
    name: rec.name,
    currentVersion: rec.version,
    metadata: { ...rec.metadata },
    createdAt: new Date(rec.createdAt).toISOString(),
    updatedAt: new Date(rec.updatedAt).toISOString(),
  };
}
