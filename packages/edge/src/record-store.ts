import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";

/**
 * Small records by ID that every process of a deployment must see alike (webhooks, API keys):
 * a single node keeps them in a file of its own (@aenv/server's util/file-record-store.ts), a
 * cluster in one Redis hash.
 */
export interface RecordStore<T extends { id: string }> {
  list(): Promise<T[]>;
  get(id: string): Promise<T | undefined>;
  put(r: T): Promise<void>;
  /** False when there was no such record. */
  delete(id: string): Promise<boolean>;
  /**
   * A token that changes whenever a record is put or deleted, so a reader that keeps a copy
   * reads the records again only when it changed; absent where reading them is cheap.
   */
  version?(): Promise<string>;
}

/**
 * A cluster's records: one Redis hash, ID → JSON, and beside it (`<key>:version`) a random
 * token every change replaces. A token, not a counter: a Redis that lost its data answers
 * none, which differs from every token a reader has seen.
 */
export class RedisRecordStore<T extends { id: string }> implements RecordStore<T> {
  private readonly versionKey: string;

  constructor(
    private readonly redis: Redis,
    private readonly key: string,
  ) {
    this.versionKey = `${key}:version`;
  }

  private token(): string {
    return randomBytes(8).toString("hex");
  }

  async version(): Promise<string> {
    return (await this.redis.get(this.versionKey)) ?? "";
  }

  async list(): Promise<T[]> {
    return (await this.redis.hvals(this.key)).map((v) => JSON.parse(v) as T);
  }

  async get(id: string): Promise<T | undefined> {
    const v = await this.redis.hget(this.key, id);
    return v ? (JSON.parse(v) as T) : undefined;
  }

  async put(r: T): Promise<void> {
    await this.redis.multi().hset(this.key, r.id, JSON.stringify(r)).set(this.versionKey, this.token()).exec();
  }

  async delete(id: string): Promise<boolean> {
    const res = await this.redis.multi().hdel(this.key, id).set(this.versionKey, this.token()).exec();
    const [err, removed] = res?.[0] ?? [null, 0];
    if (err) throw err;
    return Number(removed) > 0;
  }
}
