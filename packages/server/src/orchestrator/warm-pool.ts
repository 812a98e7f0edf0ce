import type { Template } from "../state/template-catalog.js";
import { CleanupStack } from "./cleanup-stack.js";
import { envdRequest } from "./envd-client.js";
import { runLoginShellOnce } from "./envd-process.js";
import type { NodeContext } from "./node-context.js";
import { templateSandbox } from "./records.js";
import type { Live } from "./registry.js";
import { deferRuntime } from "./start-undo.js";
import { revisionKey, type WarmImages } from "./warm-images.js";

/**
 * A restored sandbox maps its memory back in as it touches it: its first calls into envd are
 * slower than later ones. One login shell and an empty `/init` (it changes nothing) before the
 * pooled sandbox freezes take that off the create that claims it and off its first command.
 * Best effort: a failure shows at the claim.
 */
async function prime(ip: string): Promise<void> {
  await runLoginShellOnce(ip);
  await envdRequest(ip, "POST", "/init", { body: {}, timeoutMs: 30_000 }).catch(() => undefined);
}

/** A sandbox restored from a template's warm image ahead of time, frozen until a create takes it. */
export interface Pooled {
  live: Live;
  revision: string;
}

/** Creates of a template in this window decide how many wait for it. */
const RATE_WINDOW_MS = 60_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms).unref());
/** A template nobody created from for this long keeps no pool. */
const POOL_IDLE_MS = 10 * 60_000;

interface TemplatePool {
  tpl: Template;
  ready: Pooled[];
  filling?: Promise<void>;
  /** The sandbox the refill is restoring now (at low CPU priority until someone waits for it). */
  restoring?: Live;
  /** Creates that missed the pool and wait for the restore in flight, first come first served. */
  waiters: Array<(p: Pooled | undefined) => void>;
}

/**
 * Per template, a few sandboxes restored from its warm image before anyone asks, frozen (no
 * CPU) while they wait. A create takes one and only has to thaw it, apply its network policy
 * and call envd's /init (token, env, user). A claim starts the refill at once: back-to-back
 * creates (a benchmark's loop, a trainer's rollouts one after another) otherwise find the
 * pool empty every other time. A create that misses while a refill is under way joins that
 * restore (it is further along than a restore of its own would be). The size follows the
 * template's recent create rate between `sandbox.warm_pool_min` and `sandbox.warm_pool_max`;
 * a template unused for 10 minutes keeps none. Pooled sandboxes are the node's own: not
 * listed, not counted against max_sandboxes, removed at shutdown.
 */
export class WarmPool {
  private readonly pools = new Map<string, TemplatePool>();
  private readonly creates = new Map<string, number[]>();
  private closed = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: { warmImages: WarmImages },
  ) {}

  /** Whether the node may start more: not closing, and under its capacity of running sandboxes. */
  private mayGrow(): boolean {
    const { registry, cfg } = this.ctx;
    return !registry.isClosing && registry.list().filter((r) => r.state === "running").length < cfg.maxSandboxes;
  }

  get enabled(): boolean {
    return this.ctx.cfg.warmPoolMax > 0 && !!this.ctx.driver.freezer;
  }

  start(): void {
    if (!this.enabled) return;
    this.timer = setInterval(() => this.trim(), 30_000);
    this.timer.unref();
  }

  /** A pooled sandbox of this template (its revision), or undefined; refills either way. */
  take(tpl: Template): Pooled | undefined {
    if (!this.enabled || this.closed) return undefined;
    const k = revisionKey(tpl);
    const now = Date.now();
    // The rate window's creates, and always the last one (the pool's idle clock).
    const recent = (this.creates.get(k) ?? []).filter((t) => now - t < RATE_WINDOW_MS);
    recent.push(now);
    this.creates.set(k, recent);
    let pool = this.pools.get(k);
    if (!pool) {
      pool = { tpl, ready: [], waiters: [] };
      this.pools.set(k, pool);
    }
    const got = pool.ready.shift();
    this.refill(k);
    return got;
  }

  /**
   * After a miss: the sandbox the refill in flight for this template is restoring, once it
   * is ready (undefined at once when none is under way, or when it fails). Each waiter gets
   * its own; the refill goes on while some wait.
   */
  next(tpl: Template): Promise<Pooled | undefined> {
    const pool = this.pools.get(revisionKey(tpl));
    const ready = pool?.ready.shift();
    if (ready) return Promise.resolve(ready);
    if (!pool?.filling || this.closed) return Promise.resolve(undefined);
    // More waiters than restores the pool will make would wait for nothing.
    if (pool.waiters.length >= this.target(revisionKey(tpl))) return Promise.resolve(undefined);
    // Someone waits for it now: the restore in flight leaves the background. Once more a moment
    // later: threads of a restore just spawned may not be in its cgroup yet.
    const restoring = pool.restoring;
    if (restoring) {
      void this.ctx.driver.prioritize(restoring.rec.runtimeId).catch(() => {});
      setTimeout(() => void this.ctx.driver.prioritize(restoring.rec.runtimeId).catch(() => {}), 100).unref();
    }
    return new Promise((resolve) => pool.waiters.push(resolve));
  }

  /**
   * How many should wait: the creates of the last minute per 10 s, within the configured
   * bounds; the minimum holds until nobody created from the template for POOL_IDLE_MS.
   */
  private target(k: string): number {
    const now = Date.now();
    const all = this.creates.get(k) ?? [];
    const last = all[all.length - 1];
    if (last === undefined || now - last > POOL_IDLE_MS) return 0;
    const recent = all.filter((t) => now - t < RATE_WINDOW_MS).length;
    const perTen = Math.ceil(recent / (RATE_WINDOW_MS / 10_000));
    return Math.min(this.ctx.cfg.warmPoolMax, Math.max(this.ctx.cfg.warmPoolMin, perTen));
  }

  private refill(k: string): void {
    const pool = this.pools.get(k);
    if (!pool || pool.filling) return;
    pool.filling = (async () => {
      try {
        while (!this.closed && (pool.waiters.length > 0 || pool.ready.length < this.target(k)) && this.mayGrow()) {
          // Background work: a restore (~0.4 s of a core) beside a caller's own start on 2
          // cores slows both. It waits while one is in flight, unless a create waits for it.
          while (!this.closed && pool.waiters.length === 0 && !this.ctx.runner.quietFor(0)) await sleep(50);
          if (this.closed) break;
          const p = await this.restoreOne(pool);
          if (!p) break;
          const waiter = pool.waiters.shift();
          if (waiter) {
            waiter(p);
            continue;
          }
          if (this.closed) {
            await this.discard(p);
            break;
          }
          pool.ready.push(p);
          this.ctx.log.info({ template: pool.tpl.id, ready: pool.ready.length }, "warm pool sandbox ready");
        }
      } catch (err) {
        this.ctx.log.warn({ err, template: pool.tpl.id }, "warm pool refill failed");
      } finally {
        pool.filling = undefined;
        // Whoever still waits starts a sandbox of its own.
        for (const w of pool.waiters.splice(0)) w(undefined);
      }
    })();
  }

  private async restoreOne(pool: TemplatePool): Promise<Pooled | undefined> {
    const { tpl } = pool;
    const image = this.uses.warmImages.take(tpl);
    if (!image) return undefined;
    const live = templateSandbox(this.ctx.cfg, this.ctx.paths, this.ctx.runtimeDir, tpl);
    const { rec } = live;
    pool.restoring = live;
    // Pooled sandboxes are the node's own (no admission, no record): only the runtime to undo.
    const undo = new CleanupStack(this.ctx.log, { template: tpl.id });
    deferRuntime(undo, this.ctx, live);
    try {
      await this.ctx.runner.bring(live, { kind: "image", imageDir: image }, undefined, true);
      // A create waits for this one: it gets it as it is, neither primed nor frozen.
      if (pool.waiters.length > 0) {
        await this.ctx.driver.prioritize(rec.runtimeId);
      } else {
        if (live.slot) await prime(live.slot.slotIp);
        await this.ctx.driver.freezer?.freeze(rec.runtimeId);
        live.hibernated = true;
      }
      undo.release();
      return { live, revision: revisionKey(tpl) };
    } catch (err) {
      this.ctx.log.warn({ err, template: tpl.id }, "warm pool restore failed");
      await undo.unwind();
      return undefined;
    } finally {
      pool.restoring = undefined;
    }
  }

  /** A pooled sandbox that will not be used. */
  async discard(p: Pooled): Promise<void> {
    await this.ctx.runner.remove(p.live, true).catch(() => {});
  }

  /**
   * A template about to be deleted: its pooled sandboxes go, and a refill in flight (a restore
   * that reads the template's tree) is waited for, so the tree is not removed under it.
   */
  async forget(templateId: string): Promise<void> {
    for (const [k, pool] of [...this.pools]) {
      if (pool.tpl.id !== templateId) continue;
      this.pools.delete(k);
      // No creates on record: the refill stops after the restore it is in.
      this.creates.delete(k);
      await pool.filling;
      await Promise.all(pool.ready.splice(0).map((p) => this.discard(p)));
    }
  }

  /** Pools of templates nobody creates from any more are emptied. */
  private trim(): void {
    for (const [k, pool] of this.pools) {
      const extra = pool.ready.length - this.target(k);
      for (const p of pool.ready.splice(0, Math.max(0, extra))) void this.discard(p);
    }
  }

  /** Every pooled sandbox goes (shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    const all = [...this.pools.values()];
    await Promise.all(all.map((p) => p.filling));
    await Promise.all(all.flatMap((p) => p.ready.splice(0).map((x) => this.discard(x))));
  }
}
