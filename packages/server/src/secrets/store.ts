import { randomBytes } from "node:crypto";
import { ConflictError, InvalidRequestError, NotFoundError } from "@aenv/edge/errors";
import type { RecordStore } from "@aenv/edge/record-store";
import type { SecretInfo } from "@aenv/protocol";
import { SECRET_VALUE_CHARS } from "@aenv/protocol/rest";
import { FileRecordStore } from "../util/file-record-store.js";
import { hostAllowed, normaliseAllowedHosts, type SecretBinding } from "./binding.js";

/** A single node's secrets file, in its secrets folder. */
export const SECRETS_FILE = "secrets.json";

export interface SecretRecord {
  id: string;
  name: string;
  /** Write-only: kept for the runtime, never returned, never logged. */
  value: string;
  version: number;
  metadata: Record<string, string>;
  /**
   * The hosts the value may be sent to (aenv's field). Without it, the secret goes to the hosts
   * of the network rules that name it, as on E2B, unless the operator requires a binding.
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

/** How a store treats a secret that has no allowedHosts. */
export interface SecretStoreOptions {
  /**
   * Refuse to send such a secret anywhere (network.secrets_require_binding). Off, it goes to
   * the hosts of the rules that name it, which is E2B's meaning: the rule is the binding.
   */
  requireBinding?: boolean;
}

/** What the egress proxy gets for a placeholder: the value, or why it may not have it. */
export type SecretUse = { value: string } | { refused: "missing" | "unbound" | "host" | "invalid"; message: string };

/**
 * Project secrets. Kept by a RecordStore: a single node's file only root can read
 * (DATA/secrets/secrets.json, 0600 in a 0700 folder, rewritten atomically), or a cluster's
 * Redis with each value sealed (secrets/sealed-records.ts). Lookups (the egress proxy's, on
 * every request) read a view in memory; every change is written to the store before it is
 * answered, and a cluster's view is read again every second (`refresh`) and before each
 * change, so a secret made through one node is used by every node within about a second.
 * Values never leave this class: every answer is `info()`, which has no value field; `use`
 * serves only the egress proxy, which fills `${e2b.secrets.NAME}` placeholders of network
 * rules into outbound requests, and only for a host the secret is bound to.
 */
export class SecretStore {
  private byId = new Map<string, SecretRecord>();
  private reading: Promise<void> | undefined;
  /** The store's version the view was read at (RecordStore.version), when it has one. */
  private seen: string | undefined;

  constructor(
    private readonly store: RecordStore<SecretRecord>,
    private readonly opts: SecretStoreOptions = {},
  ) {}

  /** A store with its records read. */
  static async open(store: RecordStore<SecretRecord>, opts: SecretStoreOptions = {}): Promise<SecretStore> {
    const s = new SecretStore(store, opts);
    await s.refresh();
    return s;
  }

  /** A single node's store: its file in `dir`. */
  static inFolder(dir: string, opts: SecretStoreOptions = {}): Promise<SecretStore> {
    return SecretStore.open(new FileRecordStore<SecretRecord>(dir, SECRETS_FILE), opts);
  }

  /**
   * Reads the records again if they changed (one read at a time; callers meanwhile share
   * it). The version is read first: a change between the two reads is seen at the next.
   */
  refresh(): Promise<void> {
    this.reading ??= (async () => {
      const v = await this.store.version?.();
      if (v !== undefined && v === this.seen) return;
      const recs = await this.store.list();
      this.byId = new Map(recs.map((r) => [r.id, r]));
      this.seen = v;
    })().finally(() => {
      this.reading = undefined;
    });
    return this.reading;
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
   * A secret's current value for a request to `host`, for the egress proxy only, which asks
   * only for a host whose rule names the secret. Checked again here, whatever the rules said
   * when they were set: a rule may name a secret made later, and a value stored before values
   * were validated may not be a valid header value.
   */
  use(name: string, host: string, owner: string | undefined): SecretUse {
    const rec = this.find(name, { owner });
    if (!rec) return { refused: "missing", message: `secret '${name}' named by a network rule does not exist` };
    const allowed = this.hostsOf(rec);
    if (allowed !== "rule" && allowed.length === 0) {
      return {
        refused: "unbound",
        message: `secret '${rec.name}' is not bound to any host (allowedHosts), which this server requires`,
      };
    }
    if (allowed !== "rule" && !hostAllowed(allowed, host)) {
      return { refused: "host", message: `secret '${rec.name}' may not be sent to ${host}` };
    }
    if (!SECRET_VALUE_CHARS.test(rec.value)) {
      return { refused: "invalid", message: `secret '${rec.name}' is not a valid header value; give it a new value` };
    }
    return { value: rec.value };
  }

  /** A secret's name and binding (no value), for checking network rules when they are set. */
  bindingOf(ref: string, owner: string | undefined): SecretBinding | undefined {
    const rec = this.find(ref, { owner });
    return rec ? { name: rec.name, allowedHosts: this.hostsOf(rec) } : undefined;
  }

  private hostsOf(rec: SecretRecord): readonly string[] | "rule" {
    if (rec.allowedHosts?.length) return [...rec.allowedHosts];
    return this.opts.requireBinding ? [] : "rule";
  }

  private mustFind(ref: string, scope: SecretScope): SecretRecord {
    const rec = this.find(ref, scope);
    if (!rec) throw new NotFoundError(`secret '${ref}' not found`);
    return rec;
  }

  async create(
    name: string,
    value: string,
    metadata: Record<string, string> = {},
    allowedHosts: string[] | undefined,
    owner: string | undefined,
  ): Promise<SecretInfo> {
    checkValue(value);
    const canonical = name.toLowerCase();
    const hosts = allowedHosts ? normaliseAllowedHosts(allowedHosts) : undefined;
    await this.refresh();
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
    await this.store.put(rec);
    this.byId.set(rec.id, rec);
    return info(rec);
  }

  /** A new binding comes only with a new value, so no binding ever redirects the old one. */
  async update(
    ref: string,
    scope: SecretScope,
    value: string,
    metadata?: Record<string, string>,
    allowedHosts?: string[],
  ): Promise<SecretInfo> {
    checkValue(value);
    const hosts = allowedHosts ? normaliseAllowedHosts(allowedHosts) : undefined;
    await this.refresh();
    const rec: SecretRecord = { ...this.mustFind(ref, scope) };
    rec.value = value;
    rec.version += 1;
    if (metadata) rec.metadata = metadata;
    if (hosts) rec.allowedHosts = hosts;
    rec.updatedAt = Date.now();
    await this.store.put(rec);
    this.byId.set(rec.id, rec);
    return info(rec);
  }

  async get(ref: string, scope: SecretScope): Promise<SecretInfo> {
    await this.refresh();
    return info(this.mustFind(ref, scope));
  }

  async list(scope: SecretScope): Promise<SecretInfo[]> {
    await this.refresh();
    return [...this.byId.values()]
      .filter((rec) => scope.all || rec.owner === scope.owner)
      .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
      .map(info);
  }

  async delete(ref: string, scope: SecretScope): Promise<void> {
    await this.refresh();
    const rec = this.mustFind(ref, scope);
    await this.store.delete(rec.id);
    this.byId.delete(rec.id);
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
