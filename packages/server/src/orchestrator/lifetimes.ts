import { timed } from "../telemetry/prometheus.js";
import type { Killer } from "./kill.js";
import type { NodeContext } from "./node-context.js";
import type { PauseResume } from "./pause-resume.js";
import type { Live } from "./registry.js";

/**
 * When sandboxes end: expiry of the TTL clients set (ttl.ts; a pause by default, a kill with
 * autoPause: false), and sandboxes that died on their own.
 */
export class Lifetimes {
  private reaper: NodeJS.Timeout | undefined;
  private deadCheck: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: NodeContext,
    /** What an expiry does: a pause (by default) or a kill. */
    private readonly uses: { pauses: Pick<PauseResume, "pause">; killer: Pick<Killer, "kill"> },
  ) {}

  start(): void {
    this.reaper = setInterval(() => this.reap(), 1000);
    this.reaper.unref();
    const every = this.ctx.cfg.deadCheckIntervalS;
    if (every > 0) {
      this.deadCheck = setInterval(() => {
        this.sweepDead().catch((err) => this.ctx.log.warn({ err }, "could not check for dead sandboxes"));
      }, every * 1000);
      this.deadCheck.unref();
    }
  }

  stop(): void {
    if (this.reaper) clearInterval(this.reaper);
    if (this.deadCheck) clearInterval(this.deadCheck);
  }

  private reap(): void {
    const now = Date.now();
    for (const l of this.ctx.registry.all()) {
      if (l.rec.endAt > now || l.inflight || l.gate) continue;
      // One hibernation saved is running to its client and expires the same way: its pause
      // takes the image it is already in (PauseResume.keepSaved).
      if (l.rec.state !== "running" && !l.rec.pause?.idleSaved) continue;
      const id = l.rec.id;
      const act = l.rec.autoPause ? "pause" : "kill";
      this.ctx.log.info({ sandboxID: id }, `sandbox TTL expired; ${act === "pause" ? "pausing" : "killing"}`);
      // Each has its own catch: an expiry that fails is logged and retried at the next tick.
      const done =
        act === "pause"
          ? timed("pause", () => this.uses.pauses.pause(id, { memory: l.rec.autoPauseMemory !== false }))
          : this.uses.killer.kill(id);
      done.catch((err) => this.ctx.log.error({ err, sandboxID: id }, `TTL ${act} failed`));
    }
  }

  /** Sandboxes that died on their own (OOM kill, crash) are noticed and cleaned up. */
  private async sweepDead(): Promise<void> {
    const idle = (l: Live) => l.rec.state === "running" && !l.gate && !l.inflight && !l.opsPending;
    const running = this.ctx.registry.all().filter(idle);
    if (!running.length) return;
    // Any operation that started or ended while the runtime was asked (a pause and resume, a
    // snapshot whose checkpoint the answer caught) makes the answer stale for that sandbox.
    const seen = new Map(running.map((l) => [l, `${l.rec.runtimeId}/${l.opEpoch ?? 0}`]));
    const unchanged = (l: Live) => `${l.rec.runtimeId}/${l.opEpoch ?? 0}` === seen.get(l) && idle(l);
    // One by one (gVisor: its state file and /proc), not a runtime-wide list: that started a
    // runsc process every interval and could leave out a sandbox whose restore was under way.
    const driver = this.ctx.runner.driver;
    for (const l of running) {
      if (!unchanged(l) || (await driver.isRunning(l.rec.runtimeId)) || !unchanged(l)) continue;
      this.ctx.log.warn({ sandboxID: l.rec.id }, "sandbox stopped on its own (out of memory or crashed); removing it");
      this.uses.killer.kill(l.rec.id).catch(() => {});
    }
  }
}
