import type { PauseFields } from "../state/store.js";
import { countSweep } from "../telemetry/prometheus.js";
import { layerBytes } from "./fs-layer.js";
import type { Killer } from "./kill.js";
import type { NodeContext } from "./node-context.js";
import type { Live } from "./registry.js";

/** A paused sandbox retention may delete: when it was paused and what its image takes here. */
interface Candidate {
  l: Live;
  at: number;
  bytes: number;
}
/**
 * Paused sandboxes are not kept forever: past the configured age (since their pause), or
 * while their images on this node add up to more than the configured total (oldest first),
 * they are deleted. Both limits are off unless configured.
 */
export class PausedRetention {
  private timer: NodeJS.Timeout | undefined;
  /** Deletions started and not finished: not counted, not started twice. */
  private readonly retiring = new Set<string>();

  constructor(
    private readonly ctx: NodeContext,
    /** Deletes a sandbox as a client's kill does (its repository pause manifest too). */
    private readonly uses: { killer: Pick<Killer, "kill"> },
  ) {}

  start(): void {
    const { pausedMaxAgeS, pausedMaxBytes } = this.ctx.cfg;
    if (pausedMaxAgeS <= 0 && pausedMaxBytes <= 0) return;
    // Often enough for short limits; the check only reads records (image sizes are kept in them).
    const everyMs = Math.min(10_000, Math.max(1000, (pausedMaxAgeS * 1000) / 4 || 5000));
    this.timer = setInterval(() => this.sweep(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  /** Paused sandboxes nobody is acting on, oldest pause first, with when and how big. */
  private candidates(): Candidate[] {
    const now = Date.now();
    const out: Candidate[] = [];
    for (const l of this.ctx.registry.all()) {
      const rec = l.rec;
      if (rec.state !== "paused" || l.inflight || l.opsPending || this.retiring.has(rec.id)) continue;
      // Saved by hibernation: running to its client, its TTL decides.
      if (rec.pause.idleSaved) continue;
      // Pauses recorded before these fields existed start their clock now.
      if (rec.pause.at === undefined || rec.pause.bytes === undefined) {
        this.ctx.states.measured(rec, rec.pause.at ?? now, rec.pause.bytes ?? this.bytesOf(rec.pause));
      }
      out.push({ l, at: rec.pause.at ?? now, bytes: rec.pause.bytes ?? 0 });
    }
    return out.sort((a, b) => a.at - b.at);
  }

  private bytesOf(pause: PauseFields): number {
    const dir = pause.imageDir;
    if (!dir) return 0;
    try {
      return pause.kind === "filesystem" ? layerBytes(dir) : this.ctx.runner.driver.checkpointBytes(dir);
    } catch {
      return 0; // image only in the repository: nothing on this node's disk
    }
  }

  sweep(): void {
    const { pausedMaxAgeS, pausedMaxBytes } = this.ctx.cfg;
    const now = Date.now();
    let paused = this.candidates();
    if (pausedMaxAgeS > 0) {
      for (const { l, at } of paused) {
        const ageMs = now - at;
        if (ageMs < pausedMaxAgeS * 1000) continue;
        this.retire(l, { reason: "age", pausedForS: Math.floor(ageMs / 1000), maxAgeS: pausedMaxAgeS });
      }
      paused = paused.filter(({ l }) => !this.retiring.has(l.rec.id));
    }
    if (pausedMaxBytes > 0) {
      let total = paused.reduce((n, c) => n + c.bytes, 0);
      for (const { l, bytes } of paused) {
        if (total <= pausedMaxBytes) break;
        this.retire(l, { reason: "disk", pausedBytes: total, maxBytes: pausedMaxBytes });
        total -= bytes;
      }
    }
    countSweep("retention");
  }

  private retire(l: Live, why: Record<string, string | number>): void {
    const id = l.rec.id;
    this.retiring.add(id);
    this.ctx.log.warn({ sandboxID: id, ...why }, "paused sandbox deleted by the retention limit");
    this.uses.killer
      .kill(id)
      .catch((err) => this.ctx.log.error({ err, sandboxID: id }, "retention could not delete a paused sandbox"))
      .finally(() => this.retiring.delete(id));
  }
}
