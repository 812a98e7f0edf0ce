import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { RecordStore } from "@aenv/edge/record-store";
import { writePrivateFile } from "./private-file.js";

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
