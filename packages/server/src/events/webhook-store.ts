import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { writePrivateFile } from "../util/private-file.js";

/** A webhook as stored: what the API answers plus the secret it signs deliveries with. */
export interface WebhookRecord {
  id: string;
  name: string;
  url: string;
  enabled: boolean;
  events: string[];
  secret: string;
  createdAt: string;
}

/**
 * Where webhooks are kept: a node's own file, or a cluster's Redis so that every node
 * delivers its own sandboxes' events to every webhook.
 */
export interface WebhookStore {
  list(): Promise<WebhookRecord[]>;
  get(id: string): Promise<WebhookRecord | undefined>;
  put(w: WebhookRecord): Promise<void>;
  /** False when there was no such webhook. */
  delete(id: string): Promise<boolean>;
}

/** One file only root can read (DATA/webhooks/webhooks.json, 0600), rewritten atomically. */
export class FileWebhookStore implements WebhookStore {
  private readonly byId = new Map<string, WebhookRecord>();
  private readonly file: string;

  constructor(dir: string) {
    this.file = join(dir, "webhooks.json");
    if (existsSync(this.file)) {
      for (const w of JSON.parse(readFileSync(this.file, "utf8")) as WebhookRecord[]) this.byId.set(w.id, w);
    }
  }

  private save(): void {
    writePrivateFile(this.file, JSON.stringify([...this.byId.values()]));
  }

  async list(): Promise<WebhookRecord[]> {
    return [...this.byId.values()].map((w) => ({ ...w }));
  }

  async get(id: string): Promise<WebhookRecord | undefined> {
    const w = this.byId.get(id);
    return w ? { ...w } : undefined;
  }

  async put(w: WebhookRecord): Promise<void> {
    this.byId.set(w.id, { ...w });
    this.save();
  }

  async delete(id: string): Promise<boolean> {
    const had = this.byId.delete(id);
    if (had) this.save();
    return had;
  }
}

const KEY = "aenv:webhooks";

/** A cluster's webhooks: one Redis hash, ID → record. */
export class RedisWebhookStore implements WebhookStore {
  constructor(private readonly redis: Redis) {}

  async list(): Promise<WebhookRecord[]> {
    const all = await this.redis.hvals(KEY);
    return all.map((v) => JSON.parse(v) as WebhookRecord);
  }

  async get(id: string): Promise<WebhookRecord | undefined> {
    const v = await this.redis.hget(KEY, id);
    return v ? (JSON.parse(v) as WebhookRecord) : undefined;
  }

  async put(w: WebhookRecord): Promise<void> {
    await this.redis.hset(KEY, w.id, JSON.stringify(w));
  }

  async delete(id: string): Promise<boolean> {
    return (await this.redis.hdel(KEY, id)) > 0;
  }
}
