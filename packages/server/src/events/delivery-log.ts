import type { WebhookDelivery } from "@aenv/protocol";
import Database from "better-sqlite3";

/** A delivery as kept: the answered fields plus the exact body every attempt sends. */
export interface DeliveryRow {
  id: string;
  webhookId: string;
  eventId: string;
  eventType: string;
  sandboxId: string;
  body: string;
  status: WebhookDelivery["status"];
  attempts: number;
  responseStatus: number | null;
  error: string | null;
  createdAt: number;
  lastAttemptAt: number | null;
  nextAttemptAt: number | null;
}

interface Row {
  id: string;
  webhook_id: string;
  event_id: string;
  event_type: string;
  sandbox_id: string;
  body: string;
  status: WebhookDelivery["status"];
  attempts: number;
  response_status: number | null;
  error: string | null;
  created_at: number;
  last_attempt_at: number | null;
  next_attempt_at: number | null;
}

const fromRow = (r: Row): DeliveryRow => ({
  id: r.id,
  webhookId: r.webhook_id,
  eventId: r.event_id,
  eventType: r.event_type,
  sandboxId: r.sandbox_id,
  body: r.body,
  status: r.status,
  attempts: r.attempts,
  responseStatus: r.response_status,
  error: r.error,
  createdAt: r.created_at,
  lastAttemptAt: r.last_attempt_at,
  nextAttemptAt: r.next_attempt_at,
});

/**
 * This node's webhook deliveries (SQLite, WAL): pending ones are the queue, finished ones the
 * history. An event is written here before anything is sent, so a crash of the server loses
 * no pending delivery (synchronous=NORMAL: a power loss may still take the last ones).
 */
export class DeliveryLog {
  private readonly db: Database.Database;
  private readonly s;

  constructor(file: string) {
    this.db = new Database(file);
    this.db.pragma("journal_mode = WAL");
    this.db.pragma("synchronous = NORMAL");
    this.db.exec(`CREATE TABLE IF NOT EXISTS deliveries (
      id TEXT PRIMARY KEY, webhook_id TEXT NOT NULL, event_id TEXT NOT NULL, event_type TEXT NOT NULL,
      sandbox_id TEXT NOT NULL, body TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL,
      response_status INTEGER, error TEXT, created_at INTEGER NOT NULL, last_attempt_at INTEGER,
      next_attempt_at INTEGER);
    CREATE INDEX IF NOT EXISTS deliveries_due ON deliveries (status, next_attempt_at);
    CREATE INDEX IF NOT EXISTS deliveries_by_webhook ON deliveries (webhook_id, created_at);`);
    this.s = {
      add: this.db.prepare(
        `INSERT INTO deliveries VALUES (@id, @webhook_id, @event_id, @event_type, @sandbox_id, @body, 'pending', 0,
          NULL, NULL, @created_at, NULL, @created_at)`,
      ),
      due: this.db.prepare(
        "SELECT * FROM deliveries WHERE status = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?",
      ),
      nextDue: this.db.prepare("SELECT MIN(next_attempt_at) AS t FROM deliveries WHERE status = 'pending'"),
      attempt: this.db.prepare(
        `UPDATE deliveries SET status = @status, attempts = attempts + 1, response_status = @response_status,
          error = @error, last_attempt_at = @at, next_attempt_at = @next WHERE id = @id`,
      ),
      list: this.db.prepare(
        `SELECT * FROM deliveries WHERE webhook_id = @webhook AND (@status IS NULL OR status = @status)
          AND (@type IS NULL OR event_type = @type) ORDER BY created_at DESC, id DESC LIMIT @limit`,
      ),
      dropPending: this.db.prepare("DELETE FROM deliveries WHERE webhook_id = ? AND status = 'pending'"),
      expire: this.db.prepare(
        `UPDATE deliveries SET status = 'failed', next_attempt_at = NULL,
          error = COALESCE(error, '') || ' (given up: ' || ? || ')' WHERE status = 'pending' AND created_at < ?`,
      ),
      pruneOld: this.db.prepare("DELETE FROM deliveries WHERE status != 'pending' AND created_at < ?"),
      pruneOver: this.db.prepare(
        `DELETE FROM deliveries WHERE status != 'pending' AND webhook_id = @webhook AND id NOT IN (
          SELECT id FROM deliveries WHERE status != 'pending' AND webhook_id = @webhook
          ORDER BY created_at DESC LIMIT @keep)`,
      ),
      webhooks: this.db.prepare("SELECT DISTINCT webhook_id AS w FROM deliveries"),
    };
  }

  add(rows: Array<Pick<DeliveryRow, "id" | "webhookId" | "eventId" | "eventType" | "sandboxId" | "body">>): void {
    const at = Date.now();
    this.db.transaction(() => {
      for (const r of rows) {
        this.s.add.run({
          id: r.id,
          webhook_id: r.webhookId,
          event_id: r.eventId,
          event_type: r.eventType,
          sandbox_id: r.sandboxId,
          body: r.body,
          created_at: at,
        });
      }
    })();
  }

  due(now: number, limit: number): DeliveryRow[] {
    return (this.s.due.all(now, limit) as Row[]).map(fromRow);
  }

  /** When the earliest pending delivery is due; undefined when none is pending. */
  nextDue(): number | undefined {
    const t = (this.s.nextDue.get() as { t: number | null }).t;
    return t ?? undefined;
  }

  /** One attempt's outcome: delivered, failed for good, or pending again at `next`. */
  record(
    id: string,
    o: { status: WebhookDelivery["status"]; responseStatus?: number; error?: string; next?: number },
  ): void {
    this.s.attempt.run({
      id,
      status: o.status,
      response_status: o.responseStatus ?? null,
      error: o.error ?? null,
      at: Date.now(),
      next: o.next ?? null,
    });
  }

  list(webhookId: string, q: { limit: number; status?: string; eventType?: string }): DeliveryRow[] {
    return (
      this.s.list.all({
        webhook: webhookId,
        status: q.status ?? null,
        type: q.eventType ?? null,
        limit: q.limit,
      }) as Row[]
    ).map(fromRow);
  }

  /** A webhook deleted: nothing more is sent to it (its history stays until pruned). */
  dropPending(webhookId: string): void {
    this.s.dropPending.run(webhookId);
  }

  /**
   * Pending deliveries older than `windowMs` fail for good; finished ones older than
   * `keepMs` go, and past `keepPerWebhook` finished ones per webhook the oldest go.
   */
  prune(now: number, o: { windowMs: number; keepMs: number; keepPerWebhook: number; reason: string }): void {
    this.db.transaction(() => {
      this.s.expire.run(o.reason, now - o.windowMs);
      this.s.pruneOld.run(now - o.keepMs);
      for (const { w } of this.s.webhooks.all() as Array<{ w: string }>) {
        this.s.pruneOver.run({ webhook: w, keep: o.keepPerWebhook });
      }
    })();
  }

  close(): void {
    this.db.close();
  }
}
