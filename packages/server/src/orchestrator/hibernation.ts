import { countSweep } from "../telemetry/prometheus.js";
import { forEachLimit } from "../util/concurrency.js";
import type { NodeContext } from "./node-context.js";
import type { PauseResume } from "./pause-resume.js";
import type { Live } from "./registry.js";
import { NotIdleError } from "./runner.js";

/** envd calls in flight at once when a sweep asks sandboxes what their processes used. */
const GUEST_CHECKS_AT_ONCE = 8;

/** Metadata that turns hibernation off for one sandbox. */
export const HIBERNATE_METADATA_KEY = "aenv.hibernate";

interface Watch {
  lastActive: number;
  cpu?: { t: number; ns: number };
  /** The processes' own CPU time when last asked (ms). */
  guest?: { t: number; ms: number };
  /** The sandbox's operation epoch when last seen: a lifecycle operation since is activity. */
  epoch?: number;
}

/**
 * Idle sandboxes cost nearly nothing: one with no client connection, no API or proxy traffic
 * and no CPU use of its own for `sandbox.hibernate_after_secs` is frozen in place (cgroup freezer: memory stays, no
 * checkpoint) and thawed on its next proxy request or lifecycle call. Thawing takes well under
 * a millisecond. The API keeps showing it as running; its clocks keep running, so timers that
 * fell due while frozen fire on thaw.
 *
 * Idle for `sandbox.hibernate_save_after_secs`, a frozen sandbox is saved: a memory pause to disk, runtime stopped,
 * its memory given back to the host (`rec.idleSaved`; the API still shows it running and its
 * TTL runs on). Its next use resumes it: a restore's latency, nothing else. A sandbox with a
 * TCP connection to outside it is not saved (a checkpoint would reset the connection).
 */
export class Hibernation {
  private readonly watch = new Map<string, Watch>();
  private timer: NodeJS.Timeout | undefined;
  private sweeping = false;
  private busy: (id: string) => boolean = () => false;

  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: {
      /**
       * Saves an idle sandbox (a memory pause with `idle`, which the API does not show), once its
       * queue gets to it and if stillIdle() then; NotIdleError when it must not be saved.
       */
      pauses: Pick<PauseResume, "pause">;
      /**
       * CPU time the sandbox's own processes have used, ms (envd's accounting); undefined when it
       * cannot be asked. Consulted only when the host-side figure says busy and nothing else does.
       */
      guestCpuMs?: (l: Live) => Promise<number | undefined>;
    },
  ) {}

  get enabled(): boolean {
    return this.ctx.cfg.hibernateAfterS > 0 && !!this.ctx.driver.freezer && !!this.ctx.driver.cpuMeter;
  }

  /** Who knows about open client connections (the proxy). */
  setBusyCheck(fn: (id: string) => boolean): void {
    this.busy = fn;
  }

  private get everyMs(): number {
    return Math.max(250, Math.min(5000, (this.ctx.cfg.hibernateAfterS * 1000) / 4));
  }

  start(): void {
    if (!this.enabled || this.timer) return;
    const everyMs = this.everyMs;
    this.timer = setInterval(() => {
      // A sweep that saves sandboxes can outlast the interval: never two at once.
      if (this.sweeping) return;
      this.sweeping = true;
      this.sweep()
        .catch((err) => this.ctx.log.warn({ err }, "hibernation sweep failed"))
        .finally(() => {
          this.sweeping = false;
          countSweep("hibernation");
        });
    }, everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Traffic or a call reached the sandbox: it is not idle. */
  touch(id: string): void {
    const w = this.watch.get(id);
    if (w) w.lastActive = Date.now();
    else this.watch.set(id, { lastActive: Date.now() });
  }

  forget(id: string): void {
    this.watch.delete(id);
  }

  private optedOut(l: Live): boolean {
    const v = l.rec.metadata[HIBERNATE_METADATA_KEY]?.toLowerCase();
    return v === "off" || v === "false" || v === "0" || v === "no";
  }

  private async sweep(): Promise<void> {
    const now = Date.now();
    const ids = new Set<string>();
    const running: Array<{ l: Live; w: Watch; hostBusy: boolean }> = [];
    for (const l of this.ctx.registry.all()) {
      const id = l.rec.id;
      ids.add(id);
      if (l.ephemeral || l.rec.state !== "running" || !l.slot) continue;
      const w = this.watch.get(id) ?? { lastActive: now, epoch: l.opEpoch };
      this.watch.set(id, w);
      if (l.hibernated) {
        w.epoch = l.opEpoch; // its own freeze
        if (this.saveDue(l, w, now)) await this.save(l, w);
        continue;
      }
      if (w.epoch !== l.opEpoch) {
        w.epoch = l.opEpoch;
        w.lastActive = now;
      }
      const ns = this.ctx.driver.cpuMeter?.cpuTimeNs(l.rec.runtimeId);
      let hostBusy = false;
      if (ns !== undefined) {
        hostBusy =
          !!w.cpu && now > w.cpu.t && ((ns - w.cpu.ns) / 1e6 / (now - w.cpu.t)) * 100 > this.ctx.cfg.hibernateCpuPct;
        w.cpu = { t: now, ns };
      }
      if (this.busy(id) || (l.opsPending ?? 0) > 0 || l.inflight || l.gate) w.lastActive = now;
      else running.push({ l, w, hostBusy });
    }
    // Those busy by the host's figure alone are asked, GUI sandboxes being many on a node:
    // a few at a time, so a sweep does not wait on each sandbox in turn.
    await forEachLimit(
      running.filter((r) => r.hostBusy),
      GUEST_CHECKS_AT_ONCE,
      async ({ l, w }) => {
        if (!(await this.quietInside(l, w, now))) w.lastActive = now;
      },
    );
    for (const { l, w } of running) {
      if (now - w.lastActive < this.ctx.cfg.hibernateAfterS * 1000 || this.optedOut(l)) continue;
      await this.freeze(l, w);
    }
    for (const id of this.watch.keys()) if (!ids.has(id)) this.watch.delete(id);
  }

  /**
   * Whether the sandbox's processes used under `sandbox.hibernate_cpu_percent` since it was last asked. The host's
   * cgroup counts the runtime's housekeeping too: an idle desktop (a dozen GUI processes
   * with timers) costs 10-15 % of a core in the sentry while its processes use under 1 %, and
   * more on a slower host, so the host figure alone kept such sandboxes awake. A first answer,
   * or one older than three sweeps, only starts a window: busy until the next sweep.
   */
  private async quietInside(l: Live, w: Watch, now: number): Promise<boolean> {
    if (!this.uses.guestCpuMs) return false;
    const ms = await this.uses.guestCpuMs(l).catch(() => undefined);
    const prev = w.guest;
    w.guest = ms === undefined ? undefined : { t: now, ms };
    if (ms === undefined || !prev || now <= prev.t || now - prev.t > 3 * this.everyMs) return false;
    return ((ms - prev.ms) / (now - prev.t)) * 100 <= this.ctx.cfg.hibernateCpuPct;
  }

  private saveDue(l: Live, w: Watch, now: number): boolean {
    const after = this.ctx.cfg.hibernateSaveAfterS * 1000;
    return after > 0 && now - w.lastActive >= after && !l.inflight && !this.busy(l.rec.id);
  }

  /**
   * Saves it through a pause in its queue (which thaws it first). A refused or failed save
   * leaves it running; being an operation, the attempt counts as activity, so it is frozen
   * again after the idle time and tried again only after another save delay.
   */
  private async save(l: Live, w: Watch): Promise<void> {
    const since = w.lastActive;
    const id = l.rec.id;
    try {
      await this.uses.pauses.pause(id, {
        idle: true,
        stillIdle: () => this.watch.get(id)?.lastActive === since && !this.busy(id),
      });
    } catch (err) {
      if (err instanceof NotIdleError)
        this.ctx.log.info({ sandboxID: id, reason: err.message }, "idle sandbox kept in memory");
      else this.ctx.log.warn({ err, sandboxID: id }, "idle sandbox not saved");
    }
  }

  /** Freezes it through its operation queue, checking once more that nothing reached it since. */
  private freeze(l: Live, w: Watch): Promise<void> {
    return this.ctx.registry
      .enqueue(l, async () => {
        const idle = () => Date.now() - w.lastActive >= this.ctx.cfg.hibernateAfterS * 1000;
        const keepAwake = () => !idle() || l.hibernated || l.rec.state !== "running" || !l.slot || this.busy(l.rec.id);
        if (keepAwake()) return;
        // While it still runs (traffic meanwhile is served as usual, then seen below).
        await this.ctx.runner.reduceMemory(l);
        if (keepAwake()) return;
        // Marked first: traffic arriving while the freezer settles thaws it again.
        l.hibernated = true;
        try {
          await this.ctx.driver.freezer?.freeze(l.rec.runtimeId);
          this.ctx.log.debug({ sandboxID: l.rec.id }, "sandbox hibernated");
        } catch (err) {
          l.hibernated = false;
          await this.ctx.driver.freezer?.thaw(l.rec.runtimeId).catch(() => {});
          throw err;
        }
      })
      .catch((err) => this.ctx.log.warn({ err, sandboxID: l.rec.id }, "sandbox not hibernated"));
  }
}
