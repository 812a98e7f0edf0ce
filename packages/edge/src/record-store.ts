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
}

/** A cluster's records: one Redis hash, ID → JSON. */
export class RedisRecordStore<T extends { id: string }> implements RecordStore<T> {
  constructor(
    private readonly redis: Redis,
    private readonly key: string,
  ) {}

  async list(): Promise<T[]> {
    return (await this.redis.hvals(this.key)).map((v) => JSON.parse(v) as T);
  }

  async get(id: string): Promise<T | undefined> {
    const v = await this.redis.hget(this.key, id);
    return v ? (JSON.parse(v) as T) : undefined;
  }

  async put(r: T): Promise<void> {
    await this.redis.hset(this.key, r.id, JSON.stringify(r));
  }

  async delete(id: string): Promise<boolean> {
    return (await this.redis.hdel(this.key, id)) > 0;
  }
}
