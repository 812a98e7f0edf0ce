import Database from "better-sqlite3";
import type { SandboxRecord, StateStore } from "./store.js";
import { fromStored, type StoredSandboxRecord, toStored } from "./stored-record.js";

export class SqliteStateStore implements StateStore {
  private readonly db: Database.Database;
  private readonly stmts;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma("journal_mode = WAL");
    // A commit is in the WAL file (the OS's page cache) when run() returns; put/delete with
    // `sync` switch to FULL for that one commit, whose fsync takes every earlier one with it.
    this.db.pragma("synchronous = NORMAL");
    this.db.exec(`CREATE TABLE IF NOT EXISTS sandboxes (
      id TEXT PRIMARY KEY,
      state TEXT NOT NULL,
      started_at INTEGER NOT NULL,
      data TEXT NOT NULL
    )`);
    this.stmts = {
      put: this.db.prepare(
        "INSERT INTO sandboxes (id, state, started_at, data) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET state = excluded.state, data = excluded.data",
      ),
      del: this.db.prepare("DELETE FROM sandboxes WHERE id = ?"),
      get: this.db.prepare("SELECT data FROM sandboxes WHERE id = ?"),
      all: this.db.prepare("SELECT data FROM sandboxes ORDER BY started_at"),
    };
  }

  put(rec: SandboxRecord, sync: boolean): void {
    this.synced(sync, () => this.stmts.put.run(rec.id, rec.state, rec.startedAt, JSON.stringify(toStored(rec))));
  }

  delete(id: string, sync: boolean): void {
    this.synced(sync, () => this.stmts.del.run(id));
  }

  private synced(sync: boolean, write: () => void): void {
    if (!sync) {
      write();
      return;
    }
    this.db.pragma("synchronous = FULL");
    try {
      write();
    } finally {
      this.db.pragma("synchronous = NORMAL");
    }
  }

  get(id: string): SandboxRecord | undefined {
    const row = this.stmts.get.get(id) as { data: string } | undefined;
    return row ? fromStored(JSON.parse(row.data) as StoredSandboxRecord) : undefined;
  }

  all(): SandboxRecord[] {
    return (this.stmts.all.all() as Array<{ data: string }>).map((r) =>
      fromStored(JSON.parse(r.data) as StoredSandboxRecord),
    );
  }

  close(): void {
    this.db.close();
  }
}
