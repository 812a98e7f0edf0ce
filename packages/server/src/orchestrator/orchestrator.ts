import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import { ApiError, badRequest, conflict, notFound } from "../errors.js";
import type { Slot, SlotPool } from "../network/slots.js";
import type { RuntimeDriver } from "../runtime/driver.js";
import type { SandboxRecord, StateStore } from "../state/store.js";
import type { TemplateStore } from "../storage/templates.js";
import { envdRequest, waitForEnvd } from "./envd-client.js";
import { newClientId, newSandboxId, newToken } from "./ids.js";

export interface CreateRequest {
  templateID: string;
  timeoutS?: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  allowInternetAccess?: boolean;
  autoPause?: boolean;
  autoResume?: boolean;
  cpuCount?: number;
  memoryMB?: number;
}

export interface SandboxMetric {
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

export interface RecoveryReport {
  cleanedUp: string[];
  orphanedRuntime: string[];
}

interface Live {
  rec: SandboxRecord;
  slot?: Slot;
  /** Serialises lifecycle operations on one sandbox. */
  op: Promise<unknown>;
}

export interface OrchestratorDeps {
  cfg: ServerConfig;
  store: StateStore;
  templates: TemplateStore;
  driver: RuntimeDriver;
  slots: SlotPool;
  log: Logger;
  runtimeDir: string;
  resolvConf: string;
}

const ENVD_READY_TIMEOUT_MS = 30_000;

/** Sandbox lifecycle on one node: create, TTL, kill, state that survives restarts. */
export class Orchestrator {
  private readonly live = new Map<string, Live>();
  private readonly stoppedListeners: Array<(id: string) => void> = [];
  private reaper: NodeJS.Timeout | undefined;
  private closing = false;

  constructor(private readonly d: OrchestratorDeps) {}

  /** Sandboxes that were running when the server stopped cannot be resumed yet: report and clean up. */
  async recover(): Promise<RecoveryReport> {
    const report: RecoveryReport = { cleanedUp: [], orphanedRuntime: [] };
    const known = new Set<string>();
    for (const rec of this.d.store.all()) {
      known.add(rec.id);
      this.d.log.warn(
        { sandboxID: rec.id, state: rec.state },
        "sandbox did not survive the server restart; cleaning up",
      );
      await this.d.driver.destroy(rec.id);
      rmSync(rec.dir, { recursive: true, force: true });
      this.d.store.delete(rec.id);
      report.cleanedUp.push(rec.id);
    }
    for (const id of await this.d.driver.list()) {
      if (known.has(id)) continue;
      this.d.log.warn({ sandboxID: id }, "orphaned runtime sandbox; destroying");
      await this.d.driver.destroy(id);
      report.orphanedRuntime.push(id);
    }
    rmSync(join(this.d.cfg.dataDir, "sandboxes"), { recursive: true, force: true });
    return report;
  }

  startReaper(): void {
    let tick = 0;
    this.reaper = setInterval(() => {
      void this.reap();
      if (++tick % 10 === 0) void this.sweepDead();
    }, 1000);
    this.reaper.unref();
  }

  /** Sandboxes that died on their own (OOM kill, crash) are noticed and cleaned up. */
  private async sweepDead(): Promise<void> {
    const running = [...this.live.values()].filter((l) => l.rec.state === "running");
    if (!running.length) return;
    const alive = new Set(await this.d.driver.list({ runningOnly: true }));
    for (const l of running) {
      if (alive.has(l.rec.id) || l.rec.state !== "running") continue;
      this.d.log.warn({ sandboxID: l.rec.id }, "sandbox stopped on its own (out of memory or crashed); removing it");
      this.kill(l.rec.id).catch(() => {});
    }
  }

  private async reap(): Promise<void> {
    const now = Date.now();
    for (const l of this.live.values()) {
      if (l.rec.state === "running" && l.rec.endAt <= now) {
        this.d.log.info({ sandboxID: l.rec.id }, "sandbox TTL expired; killing");
        this.kill(l.rec.id).catch((err) => this.d.log.error({ err, sandboxID: l.rec.id }, "TTL kill failed"));
      }
    }
  }

  private clampTimeout(s: number | undefined): number {
    const t = s ?? this.d.cfg.defaultTimeoutS;
    if (!Number.isFinite(t) || t < 0) throw badRequest("timeout must be a non-negative number of seconds");
    return Math.min(t, this.d.cfg.maxTimeoutS);
  }

  async create(req: CreateRequest): Promise<SandboxRecord> {
    if (this.closing) throw new ApiError(503, "server is shutting down");
    const tpl = this.d.templates.get(req.templateID);
    if (!tpl) throw notFound(`template '${req.templateID}' not found`);
    const timeoutS = this.clampTimeout(req.timeoutS);
    const id = newSandboxId();
    const dir = join(this.d.cfg.dataDir, "sandboxes", id);
    const now = Date.now();
    const rec: SandboxRecord = {
      id,
      templateId: tpl.id,
      alias: tpl.name,
      clientId: newClientId(),
      envdToken: newToken(),
      startedAt: now,
      endAt: now + timeoutS * 1000,
      state: "creating",
      cpuCount: req.cpuCount ?? tpl.cpuCount,
      memoryMB: req.memoryMB ?? tpl.memoryMB,
      diskSizeMB: tpl.diskSizeMB,
      metadata: req.metadata ?? {},
      envVars: req.envVars ?? {},
      allowInternet: req.allowInternetAccess ?? true,
      autoPause: req.autoPause ?? false,
      autoResume: req.autoResume ?? false,
      slotIndex: null,
      dir,
    };
    const live: Live = { rec, op: Promise.resolve() };
    this.live.set(id, live);
    const t0 = Date.now();
    try {
      mkdirSync(dir, { recursive: true });
      live.slot = await this.d.slots.acquire({ allowInternet: rec.allowInternet });
      rec.slotIndex = live.slot.index;
      this.d.store.put(rec);
      await this.d.driver.start({
        id,
        rootfs: tpl.rootfs,
        dir,
        netnsPath: live.slot.netnsPath,
        cpuCount: rec.cpuCount,
        memoryMB: rec.memoryMB,
        hostname: "aenv",
        runtimeDir: this.d.runtimeDir,
        resolvConf: this.d.resolvConf,
      });
      const ip = live.slot.slotIp;
      await waitForEnvd(ip, ENVD_READY_TIMEOUT_MS, () => this.d.driver.isRunning(id));
      const init = await envdRequest(ip, "POST", "/init", {
        body: {
          accessToken: rec.envdToken,
          envVars: { ...tpl.env, ...rec.envVars },
          defaultUser: tpl.user,
          defaultWorkdir: tpl.workdir,
          timestamp: new Date().toISOString(),
        },
      });
      if (init.status >= 300) throw new Error(`envd /init answered ${init.status}: ${init.body}`);
      rec.state = "running";
      // The TTL counts from when the sandbox is usable.
      rec.endAt = Date.now() + timeoutS * 1000;
      this.d.store.put(rec);
      this.d.log.info({ sandboxID: id, template: tpl.id, ms: Date.now() - t0 }, "sandbox created");
      return rec;
    } catch (err) {
      this.d.log.error({ err, sandboxID: id }, "sandbox create failed");
      await this.teardown(live);
      if (err instanceof ApiError) throw err;
      throw new ApiError(500, `failed to start sandbox: ${(err as Error).message}`);
    }
  }

  /** Called whenever a sandbox stops running (the proxy drops its pooled connections). */
  onStopped(fn: (id: string) => void): void {
    this.stoppedListeners.push(fn);
  }

  private async teardown(live: Live): Promise<void> {
    const { rec } = live;
    for (const fn of this.stoppedListeners) fn(rec.id);
    await this.d.driver.destroy(rec.id).catch(() => {});
    if (live.slot) await this.d.slots.release(live.slot).catch(() => {});
    live.slot = undefined;
    rmSync(rec.dir, { recursive: true, force: true });
    this.d.store.delete(rec.id);
    this.live.delete(rec.id);
  }

  private mustGet(id: string): Live {
    const l = this.live.get(id);
    if (!l || l.rec.state === "killing") throw notFound(`sandbox '${id}' not found`);
    return l;
  }

  get(id: string): SandboxRecord {
    const l = this.mustGet(id);
    if (l.rec.state === "creating") throw notFound(`sandbox '${id}' not found`);
    return l.rec;
  }

  list(): SandboxRecord[] {
    return [...this.live.values()].map((l) => l.rec).filter((r) => r.state === "running" || r.state === "paused");
  }

  /** Where the proxy sends traffic for a sandbox, if it is running. */
  route(id: string): { ip: string; rec: SandboxRecord } | undefined {
    const l = this.live.get(id);
    if (l?.rec.state !== "running" || !l.slot) return undefined;
    return { ip: l.slot.slotIp, rec: l.rec };
  }

  known(id: string): SandboxRecord | undefined {
    return this.live.get(id)?.rec;
  }

  private serialize<T>(l: Live, fn: () => Promise<T>): Promise<T> {
    const p = l.op.then(fn, fn);
    l.op = p.catch(() => {});
    return p;
  }

  async kill(id: string): Promise<void> {
    const l = this.live.get(id);
    if (!l || l.rec.state === "killing") throw notFound(`sandbox '${id}' not found`);
    await this.serialize(l, async () => {
      if (!this.live.has(id)) return;
      l.rec.state = "killing";
      await this.teardown(l);
      this.d.log.info({ sandboxID: id }, "sandbox killed");
    });
  }

  /** Sets the TTL to now + timeout (may shorten). */
  setTimeout(id: string, timeoutS: number): void {
    const l = this.mustGet(id);
    const t = this.clampTimeout(timeoutS);
    l.rec.endAt = Date.now() + t * 1000;
    this.d.store.put(l.rec);
  }

  /** Extends the TTL to at least now + timeout; never shortens. */
  extend(id: string, timeoutS: number | undefined): SandboxRecord {
    const l = this.mustGet(id);
    if (l.rec.state === "paused") throw conflict(`sandbox '${id}' is paused; resume is not available yet`);
    const t = this.clampTimeout(timeoutS);
    l.rec.endAt = Math.max(l.rec.endAt, Date.now() + t * 1000);
    this.d.store.put(l.rec);
    return l.rec;
  }

  async metrics(id: string): Promise<SandboxMetric[]> {
    const l = this.mustGet(id);
    const rec = l.rec;
    const stats = await this.d.driver.stats(id);
    let diskUsed = 0;
    let diskTotal = rec.diskSizeMB * 1024 * 1024;
    if (l.slot) {
      try {
        const r = await envdRequest(l.slot.slotIp, "GET", "/metrics", { token: rec.envdToken, timeoutMs: 2000 });
        if (r.status === 200) {
          const m = JSON.parse(r.body) as { disk_used?: number; disk_total?: number };
          diskUsed = m.disk_used ?? 0;
          diskTotal = m.disk_total ?? diskTotal;
        }
      } catch {
        // Metrics are best effort.
      }
    }
    return [
      {
        timestampUnix: Math.floor(Date.now() / 1000),
        cpuCount: rec.cpuCount,
        cpuUsedPct: Math.round((stats?.cpuUsedPct ?? 0) * 100) / 100,
        memUsed: stats?.memUsedBytes ?? 0,
        memTotal: rec.memoryMB * 1024 * 1024,
        memCache: stats?.memCacheBytes ?? 0,
        diskUsed,
        diskTotal,
      },
    ];
  }

  async close(opts: { killAll: boolean }): Promise<void> {
    this.closing = true;
    if (this.reaper) clearInterval(this.reaper);
    if (opts.killAll) {
      await Promise.all([...this.live.keys()].map((id) => this.kill(id).catch(() => {})));
    }
  }
}
