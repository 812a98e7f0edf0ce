import { createHash, randomUUID } from "node:crypto";
import { InvalidRequestError, NotFoundError } from "@aenv/edge/errors";
import { cachedFor } from "@aenv/edge/fresh";
import {
  DEFAULT_TEAM_ID,
  WEBHOOK_HEADERS,
  type Webhook,
  type WebhookDelivery,
  type WebhookPayload,
} from "@aenv/protocol";
import type { NewWebhook, WebhookDeliveriesQuery, WebhookUpdate } from "@aenv/protocol/rest";
import type { Logger } from "pino";
import { fetch } from "undici";
import type { WebhooksConfig } from "../config.js";
import type { LifecycleEvent } from "../orchestrator/lifecycle-events.js";
import { forEachLimit } from "../util/concurrency.js";
import { OutboundGuard, type Resolver } from "../util/outbound-address.js";
import type { DeliveryLog, DeliveryRow } from "./delivery-log.js";
import type { WebhookRecord, WebhookStore } from "./webhook-store.js";

/** E2B's signature: sha256 over the secret followed by the body, base64url without padding. */
export function webhookSignature(secret: string, body: string): string {
  return createHash("sha256")
    .update(secret + body)
    .digest("base64url");
}

const MAX_BACKOFF_MS = 10 * 60_000;
/** Finished deliveries kept: a week, and at most this many per webhook. */
const KEEP_MS = 7 * 86_400_000;
const KEEP_PER_WEBHOOK = 1000;
const ATTEMPT_TIMEOUT_MS = 10_000;
/** Deliveries sent at once, and taken from the queue per round. */
const PARALLEL = 8;
const BATCH = 64;
/** Webhooks are re-read at most this often to match events (a cluster's are in Redis). */
const STORE_CACHE_MS = 1000;

const shape = (w: WebhookRecord): Webhook => ({
  id: w.id,
  teamID: DEFAULT_TEAM_ID,
  name: w.name,
  createdAt: w.createdAt,
  enabled: w.enabled,
  url: w.url,
  events: [...w.events],
});

const iso = (ms: number | null) => (ms === null ? undefined : new Date(ms).toISOString());

const deliveryShape = (d: DeliveryRow): WebhookDelivery => ({
  id: d.id,
  webhookID: d.webhookId,
  eventID: d.eventId,
  eventType: d.eventType,
  sandboxID: d.sandboxId,
  status: d.status,
  attempts: d.attempts,
  ...(d.responseStatus !== null ? { responseStatus: d.responseStatus } : {}),
  ...(d.error !== null ? { error: d.error } : {}),
  createdAt: new Date(d.createdAt).toISOString(),
  ...(d.lastAttemptAt !== null ? { lastAttemptAt: iso(d.lastAttemptAt) } : {}),
  ...(d.status === "pending" && d.nextAttemptAt !== null ? { nextAttemptAt: iso(d.nextAttemptAt) } : {}),
});

export interface WebhooksDeps {
  store: WebhookStore;
  deliveries: DeliveryLog;
  cfg: WebhooksConfig;
  log: Logger;
  /** For tests: name resolution. */
  resolve?: Resolver;
}

/**
 * Sandbox lifecycle webhooks as E2B sends them: registered through the API, told this node's
 * lifecycle events (created, killed, paused, resumed, updated, forked), each delivered as a
 * signed POST and retried with backoff until the receiver answers 2xx or the window passes.
 * Receivers at loopback, private or link-local addresses are refused unless the operator
 * allows them (webhooks.allow_private); metadata addresses always are.
 */
export class Webhooks {
  private readonly guard: OutboundGuard;
  private readonly cached = cachedFor(STORE_CACHE_MS, () => this.d.store.list());
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;
  /** Events being matched to webhooks: a stop waits for them to be queued. */
  private readonly publishing = new Set<Promise<void>>();

  constructor(private readonly d: WebhooksDeps) {
    this.guard = new OutboundGuard(
      { allowPrivate: d.cfg.allowPrivate, ...(d.resolve ? { resolve: d.resolve } : {}) },
      (cls, address, host) =>
        new InvalidRequestError(
          cls === "metadata"
            ? `webhook URL refused: ${host} is ${address}, a link-local/metadata address`
            : `webhook URL refused: ${host} is ${address}, a loopback, private or link-local address ` +
                "(an operator may allow such receivers with webhooks.allow_private / AENV_ALLOW_PRIVATE_WEBHOOKS)",
        ),
      (host) => new InvalidRequestError(`webhook URL refused: ${host} does not resolve`),
    );
  }

  /** Refuses a URL whose host is, or resolves only to, addresses deliveries may not reach. */
  private checkUrl(raw: string): Promise<void> {
    return this.guard.checkReachable(new URL(raw));
  }

  /** The webhook as stored, for the ownership check (undefined: no such webhook). */
  find(id: string): Promise<WebhookRecord | undefined> {
    return this.d.store.get(id);
  }

  private async mustGet(id: string): Promise<WebhookRecord> {
    const w = await this.d.store.get(id);
    if (!w) throw new NotFoundError(`webhook '${id}' not found`);
    return w;
  }

  /** `owner`: the API key registering it (absent: the operator's, which hears of every sandbox). */
  async create(b: NewWebhook, owner?: string): Promise<Webhook> {
    await this.checkUrl(b.url);
    const w: WebhookRecord = {
      id: randomUUID(),
      name: b.name,
      url: b.url,
      enabled: b.enabled ?? true,
      events: [...new Set(b.events)],
      secret: b.signatureSecret,
      createdAt: new Date().toISOString(),
      ...(owner ? { owner } : {}),
    };
    await this.d.store.put(w);
    this.cached.drop();
    return shape(w);
  }

  /** The webhooks `visible` lets the caller see (its own; the operator all). */
  async list(visible: (owner: string | undefined) => boolean = () => true): Promise<Webhook[]> {
    return (await this.d.store.list())
      .filter((w) => visible(w.owner))
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt))
      .map(shape);
  }

  async get(id: string): Promise<Webhook> {
    return shape(await this.mustGet(id));
  }

  async update(id: string, b: WebhookUpdate): Promise<Webhook> {
    const w = await this.mustGet(id);
    if (b.url !== undefined) await this.checkUrl(b.url);
    const next: WebhookRecord = {
      ...w,
      ...(b.name !== undefined ? { name: b.name } : {}),
      ...(b.url !== undefined ? { url: b.url } : {}),
      ...(b.enabled !== undefined ? { enabled: b.enabled } : {}),
      ...(b.events !== undefined ? { events: [...new Set(b.events)] } : {}),
      ...(b.signatureSecret !== undefined ? { secret: b.signatureSecret } : {}),
    };
    await this.d.store.put(next);
    this.cached.drop();
    return shape(next);
  }

  async delete(id: string): Promise<void> {
    if (!(await this.d.store.delete(id))) throw new NotFoundError(`webhook '${id}' not found`);
    this.d.deliveries.dropPending(id);
    this.cached.drop();
  }

  /** This node's deliveries to a webhook, newest first (a gateway merges every node's). */
  async deliveries(id: string, q: WebhookDeliveriesQuery): Promise<WebhookDelivery[]> {
    await this.mustGet(id);
    return this.d.deliveries
      .list(id, {
        limit: q.limit ?? 100,
        ...(q.deliveryStatus ? { status: q.deliveryStatus } : {}),
        ...(q.eventType ? { eventType: q.eventType } : {}),
      })
      .map(deliveryShape);
  }

  /** The last list the store answered: events keep matching it while the store (Redis) is out. */
  private lastRead: WebhookRecord[] | undefined;

  private webhooks(): Promise<WebhookRecord[]> {
    return this.cached.get().then(
      (l) => {
        this.lastRead = l;
        return l;
      },
      (err: unknown) => {
        if (this.lastRead) return this.lastRead;
        throw err;
      },
    );
  }

  /** A lifecycle event: queued (durably) for every enabled webhook subscribed to it. */
  publish(e: LifecycleEvent): void {
    const type = `sandbox.lifecycle.${e.kind}`;
    const p = this.webhooks().then(
      (all) => {
        const to = all.filter(
          (w) => w.enabled && w.events.includes(type) && (w.owner === undefined || w.owner === e.owner),
        );
        if (!to.length || this.stopped) return;
        const eventId = randomUUID();
        const payload: WebhookPayload = {
          version: "v1",
          id: eventId,
          type,
          eventData: {
            sandbox_metadata: e.metadata,
            ...(e.parentId !== undefined ? { parent_sandbox_id: e.parentId } : {}),
          },
          sandboxBuildId: e.templateId,
          sandboxExecutionId: e.executionId,
          sandboxId: e.sandboxId,
          sandboxTeamId: DEFAULT_TEAM_ID,
          sandboxTemplateId: e.templateId,
          timestamp: new Date(e.at).toISOString(),
        };
        const body = JSON.stringify(payload);
        this.d.deliveries.add(
          to.map((w) => ({
            id: randomUUID(),
            webhookId: w.id,
            eventId,
            eventType: type,
            sandboxId: e.sandboxId,
            body,
          })),
        );
        this.kick();
      },
      (err: Error) =>
        this.d.log.warn({ err: err.message, sandboxID: e.sandboxId }, "webhooks never read yet; event dropped"),
    );
    this.publishing.add(p);
    void p.finally(() => this.publishing.delete(p));
  }

  /** Delivers what is due now, then waits for the next due one (or a kick). */
  start(): void {
    this.kick();
  }

  private kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.running = this.round()
      .catch((err: Error) => this.d.log.warn({ err: err.message }, "webhook deliveries failed"))
      .finally(() => {
        this.running = undefined;
        if (this.stopped) return;
        if (this.again) {
          this.again = false;
          this.kick();
          return;
        }
        const next = this.d.deliveries.nextDue();
        // Pruning runs at least once a minute even with nothing pending.
        const wait = next === undefined ? 60_000 : Math.max(0, Math.min(60_000, next - Date.now()));
        this.timer = setTimeout(() => this.kick(), wait);
        this.timer.unref();
      });
  }

  private async round(): Promise<void> {
    const now = Date.now();
    this.d.deliveries.prune(now, {
      windowMs: this.d.cfg.windowS * 1000,
      keepMs: KEEP_MS,
      keepPerWebhook: KEEP_PER_WEBHOOK,
      reason: `not accepted within ${this.d.cfg.windowS} s`,
    });
    const due = this.d.deliveries.due(now, BATCH);
    if (!due.length) return;
    const hooks = new Map((await this.webhooks()).map((w) => [w.id, w]));
    await forEachLimit(due, PARALLEL, (d) => this.attempt(d, hooks.get(d.webhookId)));
    if (due.length === BATCH) this.again = true;
  }

  private async attempt(d: DeliveryRow, w: WebhookRecord | undefined): Promise<void> {
    if (!w) {
      this.d.deliveries.record(d.id, { status: "failed", error: "the webhook was deleted" });
      return;
    }
    if (!w.enabled) {
      this.d.deliveries.record(d.id, { status: "failed", error: "the webhook is disabled" });
      return;
    }
    let status: number | undefined;
    let error: string | undefined;
    try {
      const url = new URL(w.url);
      this.guard.checkLiteral(url);
      const res = await fetch(url, {
        method: "POST",
        body: d.body,
        redirect: "manual",
        dispatcher: this.guard.agent,
        signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
        headers: {
          "content-type": "application/json",
          "user-agent": "aenv-webhooks/1",
          [WEBHOOK_HEADERS.webhookId]: w.id,
          [WEBHOOK_HEADERS.deliveryId]: d.id,
          [WEBHOOK_HEADERS.signatureVersion]: "v1",
          [WEBHOOK_HEADERS.signature]: webhookSignature(w.secret, d.body),
        },
      });
      status = res.status;
      await res.body?.cancel().catch(() => {});
      if (status >= 200 && status < 300) {
        this.d.deliveries.record(d.id, { status: "delivered", responseStatus: status });
        return;
      }
      error = `the receiver answered ${status}`;
    } catch (err) {
      const cause = (err as { cause?: Error }).cause;
      error = (cause instanceof Error ? cause.message : undefined) ?? (err as Error).message;
    }
    // Full jitter over an exponential wait: receivers coming back are not hit all at once.
    const backoff = Math.min(MAX_BACKOFF_MS, this.d.cfg.retryFirstMs * 2 ** Math.min(d.attempts, 20));
    const next = Date.now() + Math.round(backoff / 2 + (Math.random() * backoff) / 2);
    const giveUp = next > d.createdAt + this.d.cfg.windowS * 1000;
    this.d.deliveries.record(d.id, {
      status: giveUp ? "failed" : "pending",
      ...(status !== undefined ? { responseStatus: status } : {}),
      ...(error !== undefined ? { error } : {}),
      ...(giveUp ? {} : { next }),
    });
  }

  async stop(): Promise<void> {
    await Promise.allSettled([...this.publishing]);
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    this.d.deliveries.close();
  }
}
