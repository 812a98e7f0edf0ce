import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { writePrivateFile } from "./private-file.js";

/**
 * Small records by ID that every process of a deployment must see alike (webhooks, API keys):
 * a single node keeps them in a file of its own, a cluster in one Redis hash.
 */
export interface RecordStore<T extends { id: string }> {
  list(): Promise<T[]>;
  get(id: string): Promise<T | undefined>;
  put(r: T): Promise<void>;
  /** False when there was no such record. */
  delete(id: string): Promise<boolean>;
}

/** One file only root can read (0600), rewritten atomically on each change. */
export class FileRecordStore<T extends { id: string }> implements RecordStore<T> {
  private readonly byId = new Map<string, T>();
  private readonly file: string;

  constructor(dir: string, name: string) {
    this.file = join(dir, name);
    if (existsSync(this.file)) {
      for (const r of JSON.parse(readFileSync(this.file, "utf8")) as T[]) this.byId.set(r.id, r);
    }
  }

  private save(): void {
    writePrivateFile(this.file, JSON.stringify([...this.byId.values()]));
  }

  async list(): Promise<T[]> {
    return [...this.byId.values()].map((r) => ({ ...r }));
  }

  async get(id: string): Promise<T | undefined> {
    const r = this.byId.get(id);
    return r ? { ...r } : undefined;
  }

  async put(r: T): Promise<void> {
    this.byId.set(r.id, { ...r });
    this.save();
  }

  async delete(id: string): Promise<boolean> {
    const had = this.byId.delete(id);
    if (had) this.save();
    return had;
  }
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
