import { createHash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ConflictError, NotFoundError } from "@aenv/edge/errors";
import type { Logger } from "pino";
import { removePath } from "../../util/beneath.js";
import { writePrivateFile } from "../../util/private-file.js";
import type { VolumeBackend } from "./backend.js";

/** What the node keeps about a volume (DATA/volumes/<id>/volume.json, 0600: it holds the token). */
export interface VolumeRecord {
  id: string;
  name: string;
  /** Authorises the content API for this volume only (Authorization: Bearer). */
  token: string;
  createdAt: number;
  /** The API key that made it (absent: the operator's). */
  owner?: string;
}

const digest = (s: string) => createHash("sha256").update(s).digest();

/**
 * The volumes this node holds: names are unique (a create body mounts volumes by name), records
 * are written after the folder exists, so a crash never leaves a record without its files.
 */
export class VolumeCatalog {
  private readonly byId = new Map<string, VolumeRecord>();
  /** Being destroyed: invisible to lookups, so no new sandbox mounts it meanwhile. */
  private readonly deleting = new Set<string>();

  constructor(
    private readonly dir: string,
    private readonly volumeDir: (id: string) => string,
    readonly backend: VolumeBackend,
    private readonly log: Logger,
  ) {}

  /** Reads every record and attaches its volume; removes half-created and half-deleted volumes. */
  async load(): Promise<void> {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    for (const entry of readdirSync(this.dir)) {
      const path = join(this.dir, entry);
      const file = join(path, "volume.json");
      if (entry.endsWith(".deleting") || !existsSync(file)) {
        this.log.warn({ path }, "removing an incomplete volume folder");
        try {
          // A crash between mounting and writing the record leaves it mounted.
          if (!entry.endsWith(".deleting")) await this.backend.detach(entry);
          await removePath(path);
        } catch (err) {
          this.log.error({ err, path }, "incomplete volume folder not removed");
        }
        continue;
      }
      let rec: VolumeRecord;
      try {
        rec = JSON.parse(readFileSync(file, "utf8")) as VolumeRecord;
      } catch (err) {
        this.log.error({ err, path }, "unreadable volume record; left in place");
        continue;
      }
      try {
        await this.backend.attach(rec.id);
        this.byId.set(rec.id, rec);
      } catch (err) {
        this.log.error({ err, volumeID: rec.id }, "volume could not be attached; not served");
      }
    }
  }

  async create(name: string, owner: string | undefined): Promise<VolumeRecord> {
    // Also against volumes still being created or destroyed: a name is taken until they finish.
    // Names are each API key's own (a create body mounts the caller's volumes by name).
    if ([...this.byId.values()].some((r) => r.name === name && r.owner === owner)) {
      throw new ConflictError(`volume '${name}' already exists`);
    }
    const rec: VolumeRecord = {
      id: randomUUID(),
      name,
      token: `vtok_${randomBytes(24).toString("hex")}`,
      createdAt: Date.now(),
      ...(owner ? { owner } : {}),
    };
    // Claimed before the first await, so two concurrent creates of one name cannot both win.
    this.byId.set(rec.id, rec);
    this.deleting.add(rec.id);
    try {
      await this.backend.create(rec.id);
      writePrivateFile(join(this.volumeDir(rec.id), "volume.json"), JSON.stringify(rec));
    } catch (err) {
      this.byId.delete(rec.id);
      await this.backend.remove(rec.id).catch(() => undefined);
      throw err;
    } finally {
      this.deleting.delete(rec.id);
    }
    return rec;
  }

  get(id: string): VolumeRecord | undefined {
    return this.deleting.has(id) ? undefined : this.byId.get(id);
  }

  mustGet(id: string): VolumeRecord {
    const rec = this.get(id);
    if (!rec) throw new NotFoundError(`volume '${id}' not found`);
    return rec;
  }

  byName(name: string, owner: string | undefined): VolumeRecord | undefined {
    for (const rec of this.byId.values()) {
      if (rec.name === name && rec.owner === owner && !this.deleting.has(rec.id)) return rec;
    }
    return undefined;
  }

  list(): VolumeRecord[] {
    return [...this.byId.values()].filter((r) => !this.deleting.has(r.id)).sort((a, b) => a.createdAt - b.createdAt);
  }

  /** At a graceful stop, once no sandbox runs: releases every volume's mount. */
  async close(): Promise<void> {
    for (const id of this.byId.keys()) {
      await this.backend.detach(id).catch((err) => this.log.warn({ err, volumeID: id }, "volume not detached"));
    }
  }

  /** Host folder of a volume's files. */
  root(id: string): string {
    return this.backend.root(id);
  }

  /** Whether `token` is this volume's (constant time). */
  tokenMatches(rec: VolumeRecord, token: string): boolean {
    return timingSafeEqual(digest(token), digest(rec.token));
  }

  /**
   * Deletes a volume and its files. The caller has checked no sandbox uses it; from here on
   * lookups miss it (synchronously), so no create can mount it while its files go.
   */
  async destroy(id: string): Promise<void> {
    this.mustGet(id);
    this.deleting.add(id);
    try {
      await this.backend.remove(id);
      // What a sandbox wrote there may be links: removed by descriptor, never following one.
      await removePath(this.volumeDir(id));
      this.byId.delete(id);
    } finally {
      this.deleting.delete(id);
    }
  }
}
