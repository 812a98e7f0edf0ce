import { createHash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import type { ApiKeyInfo, CreatedApiKey, KeyMask } from "@aenv/protocol";
import type { ApiKeyLimits } from "@aenv/protocol/rest";
import { InvalidRequestError, NotFoundError } from "./errors.js";
import { cachedFor } from "./fresh.js";
import type { RecordStore } from "./record-store.js";

/**
 * API keys as tenants. The operator's key (the server's configured one) sees and does
 * everything; every other key is a tenant that sees and acts on what it made (and the
 * operator's templates), within its limits. Keys are stored as sha256 only (a key is 160
 * random bits: a slow hash adds nothing) and shown once, when created.
 */

/** Who is calling: the operator, or one API key. */
export interface Tenant {
  id: string;
  name: string;
  admin: boolean;
  limits?: ApiKeyLimits;
}

/** Who asks, as the orchestrator needs it: which owner, and whether it sees everything. */
export type Requester = Pick<Tenant, "id" | "admin">;

/** Owner of what the operator's key makes, and of everything made before keys existed. */
export const OPERATOR_ID = "operator";
export const OPERATOR: Tenant = { id: OPERATOR_ID, name: "operator", admin: true };

/** Whether `t` may see and act on something `owner` made (absent: the operator). */
export function owns(t: Requester, owner: string | undefined): boolean {
  return t.admin || (owner ?? OPERATOR_ID) === t.id;
}

/** The owner to record for something `t` makes (absent for the operator, as before keys existed). */
export function ownerOf(t: Requester): { owner?: string } {
  return t.admin ? {} : { owner: t.id };
}

export interface ApiKeyRecord {
  id: string;
  name: string;
  sha256: string;
  mask: KeyMask;
  createdAt: string;
  limits?: ApiKeyLimits;
}

/**
 * When a key was last used, kept apart from its record: written in the background on use, it
 * could otherwise overwrite a record changed meanwhile (new limits lost) or bring a revoked key
 * back. A use of a key that is gone leaves a stray entry that nothing reads.
 */
export interface KeyUse {
  id: string;
  at: string;
}

/** The keys this server makes: E2B's form, `e2b_` and 40 hex digits. */
export const TENANT_KEY_FORM = /^e2b_[0-9a-f]{40}$/;
const KEY_PREFIX = "e2b_";
/** How stale a process's view of the keys may be: a new or revoked key takes effect within it elsewhere. */
const KEYS_FRESH_MS = 1000;
/** An unknown key re-reads the store at most this often. */
const MISS_RELOAD_MS = 100;
/** lastUsed is written at most this often per key (it is shown, not enforced). */
const LAST_USED_EVERY_MS = 60_000;

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

function maskOf(key: string): KeyMask {
  const body = key.slice(KEY_PREFIX.length);
  return {
    prefix: KEY_PREFIX,
    valueLength: body.length,
    maskedValuePrefix: body.slice(0, 2),
    maskedValueSuffix: body.slice(-4),
  };
}

function infoOf(r: ApiKeyRecord, lastUsed?: string): ApiKeyInfo {
  return {
    id: r.id,
    name: r.name,
    mask: r.mask,
    createdAt: r.createdAt,
    createdBy: null,
    lastUsed: lastUsed ?? null,
    ...(r.limits ? { limits: r.limits } : {}),
  };
}

export class Tenants {
  private readonly operatorDigest: Buffer;
  private readonly operatorMask: KeyMask;
  private readonly keys = cachedFor(KEYS_FRESH_MS, async () => {
    const byHash = new Map<string, ApiKeyRecord>();
    for (const r of await this.store.list()) byHash.set(r.sha256, r);
    return byHash;
  });
  private readonly lastUsedWritten = new Map<string, number>();
  private lastMissReload = Number.NEGATIVE_INFINITY;
  private missReload: Promise<Map<string, ApiKeyRecord>> | undefined;

  constructor(
    private readonly store: RecordStore<ApiKeyRecord>,
    private readonly uses: RecordStore<KeyUse>,
    operatorKey: string,
    private readonly onUseFailed: (err: Error) => void = () => {},
  ) {
    this.operatorDigest = createHash("sha256").update(operatorKey).digest();
    this.operatorMask = maskOf(operatorKey.startsWith(KEY_PREFIX) ? operatorKey : `${KEY_PREFIX}${operatorKey}`);
  }

  /** Whether `key` is the operator's. Constant-time, and needs no store. */
  isOperator(key: string): boolean {
    return timingSafeEqual(createHash("sha256").update(key).digest(), this.operatorDigest);
  }

  /**
   * The tenant a key is, or undefined for a key that is none (unknown or revoked). `vouched`:
   * a gateway passed the request on (it found the key in the shared store), so a miss here is
   * a key made a moment ago and always worth one more read.
   */
  async resolve(key: string, opts: { vouched?: boolean } = {}): Promise<Tenant | undefined> {
    if (this.isOperator(key)) return OPERATOR;
    if (!TENANT_KEY_FORM.test(key)) return undefined;
    const hash = sha256(key);
    let r = (await this.keys.get()).get(hash);
    // A key made a moment ago on another process (a gateway, another node): read again, at
    // most every MISS_RELOAD_MS unless vouched for, so unknown keys cannot make every request
    // a store read. Misses meanwhile wait for the read in flight rather than fail beside it.
    if (!r) {
      const due = opts.vouched || performance.now() - this.lastMissReload > MISS_RELOAD_MS;
      if (!this.missReload && due) {
        this.lastMissReload = performance.now();
        this.keys.drop();
        const p = this.keys.get();
        this.missReload = p;
        void p
          .finally(() => {
            if (this.missReload === p) this.missReload = undefined;
          })
          .catch(() => {});
      }
      if (this.missReload) r = (await this.missReload).get(hash);
    }
    if (!r) return undefined;
    this.noteUse(r);
    return { id: r.id, name: r.name, admin: false, ...(r.limits ? { limits: r.limits } : {}) };
  }

  private noteUse(r: ApiKeyRecord): void {
    const now = Date.now();
    if (now - (this.lastUsedWritten.get(r.id) ?? 0) < LAST_USED_EVERY_MS) return;
    this.lastUsedWritten.set(r.id, now);
    void this.uses.put({ id: r.id, at: new Date(now).toISOString() }).catch((err: Error) => this.onUseFailed(err));
  }

  /** Every key, the operator's first (it cannot be revoked; its limits are none). */
  async list(): Promise<ApiKeyInfo[]> {
    const all = (await this.store.list()).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    const used = new Map((await this.uses.list()).map((u) => [u.id, u.at]));
    const operator: ApiKeyInfo = {
      id: OPERATOR_ID,
      name: OPERATOR.name,
      mask: this.operatorMask,
      createdAt: new Date(0).toISOString(),
      createdBy: null,
      lastUsed: null,
      admin: true,
    };
    return [operator, ...all.map((r) => infoOf(r, used.get(r.id)))];
  }

  async create(name: string, limits: ApiKeyLimits | undefined): Promise<CreatedApiKey> {
    const key = `${KEY_PREFIX}${randomBytes(20).toString("hex")}`;
    const r: ApiKeyRecord = {
      id: randomUUID(),
      name,
      sha256: sha256(key),
      mask: maskOf(key),
      createdAt: new Date().toISOString(),
      ...(limits ? { limits } : {}),
    };
    await this.store.put(r);
    this.keys.drop();
    return { ...infoOf(r), key };
  }

  async update(id: string, u: { name?: string; limits?: ApiKeyLimits | null }): Promise<ApiKeyInfo> {
    const cur = await this.mustGet(id);
    const { limits: _old, ...rest } = cur;
    const limits = u.limits === undefined ? cur.limits : (u.limits ?? undefined);
    const next: ApiKeyRecord = { ...rest, ...(u.name ? { name: u.name } : {}), ...(limits ? { limits } : {}) };
    await this.store.put(next);
    this.keys.drop();
    return infoOf(next, (await this.uses.get(id))?.at);
  }

  async revoke(id: string): Promise<void> {
    await this.mustGet(id);
    await this.store.delete(id);
    await this.uses.delete(id);
    this.keys.drop();
  }

  private async mustGet(id: string): Promise<ApiKeyRecord> {
    if (id === OPERATOR_ID)
      throw new InvalidRequestError("the operator's key is the server's configuration: change it there");
    const r = await this.store.get(id);
    if (!r) throw new NotFoundError(`API key '${id}' not found`);
    return r;
  }
}
