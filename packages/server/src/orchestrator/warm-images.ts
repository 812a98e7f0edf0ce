import { existsSync, mkdirSync, readdirSync, rmSync, statSync, utimesSync } from "node:fs";
import { dirname } from "node:path";
import { type Template, usable } from "../state/template-catalog.js";
import { countWarmImage } from "../telemetry/prometheus.js";
import { commitDir } from "../util/fsync.js";
import { runLoginShellOnce } from "./envd-process.js";
import type { NodeContext } from "./node-context.js";
import { templateSandbox } from "./records.js";
import { runStartCommand } from "./start-command.js";

/** Warm images are per revision: a tag can start an older build than the current one. */
export function revisionKey(tpl: Pick<Template, "id" | "revision">): string {
  return `${tpl.id}-r${tpl.revision}`;
}

/** Marks a warm image used (prune goes by its age); best effort. */
function touch(dir: string): void {
  try {
    const now = new Date();
    utimesSync(dir, now, now);
  } catch {
    // Read-only or gone: the restore itself will say.
  }
}

/**
 * A warm image is a template checkpointed right after boot (envd up, start command running,
 * ready command passed): creating from it is a restore instead of a boot. Kept beside the
 * templates, so every server on the host shares them.
 */
export class WarmImages {
  private readonly ready = new Map<string, string>();
  private readonly warming = new Map<string, Promise<void>>();

  constructor(private readonly ctx: NodeContext) {}

  private dirOf(tpl: Template): string {
    return this.ctx.paths.warmImage(`${revisionKey(tpl)}-${this.ctx.checkpointKey}`);
  }

  /** The template's warm image when it has a complete one (marked used), else undefined. */
  take(tpl: Template): string | undefined {
    const dir = this.ready.get(revisionKey(tpl));
    const hit = dir !== undefined && this.ctx.runner.driver.isCompleteCheckpoint(dir);
    countWarmImage(hit);
    if (!hit) return undefined;
    touch(dir);
    return dir;
  }

  /** A warm image that failed to restore is not used again until it is retaken. */
  drop(tpl: Template): void {
    this.ready.delete(revisionKey(tpl));
  }

  /** Every usable template gets one, at start, in the background; failures mean cold boots. */
  async prepareAll(): Promise<void> {
    try {
      this.prune();
    } catch (err) {
      this.ctx.log.warn({ err }, "could not prune warm images");
    }
    for (const tpl of this.ctx.templates.list()) {
      if (this.ctx.registry.isClosing) return;
      if (!usable(tpl) || !tpl.warm) continue;
      try {
        await this.ensure(tpl);
      } catch (err) {
        this.ctx.log.warn({ err, template: tpl.id }, "could not build a warm image; template will cold-boot");
      }
    }
  }

  /**
   * Warm images of other runtime builds (an upgraded aenv, another platform) never restore
   * here: one unused for `runtime.stale_warm_image_secs` is removed (a server still using it
   * takes it again), as are captures a crash left half-written. Creates touch the image they
   * restore, so its age is the time since it was last used.
   */
  prune(): void {
    const dir = this.ctx.paths.warmImages;
    if (!existsSync(dir)) return;
    const now = Date.now();
    for (const name of readdirSync(dir)) {
      const p = this.ctx.paths.warmImage(name);
      const st = statSync(p, { throwIfNoEntry: false });
      if (!st?.isDirectory()) continue;
      const idleS = (now - st.mtimeMs) / 1000;
      const partial = /\.tmp-\d+$/.test(name);
      const stale = partial
        ? idleS > 3600
        : !name.endsWith(`-${this.ctx.checkpointKey}`) && idleS > this.ctx.cfg.staleWarmImageS;
      if (!stale) continue;
      rmSync(p, { recursive: true, force: true });
      this.ctx.log.info({ image: name, idleS: Math.round(idleS) }, "stale warm image removed");
    }
  }

  /** Makes sure a template has a warm image for this runtime, capturing one if needed. */
  async ensure(tpl: Template, onLog?: (line: string) => void): Promise<void> {
    const dir = this.dirOf(tpl);
    if (this.ctx.runner.driver.isCompleteCheckpoint(dir)) {
      this.ready.set(revisionKey(tpl), dir);
      this.ctx.log.info({ template: tpl.id, found: true }, "template warm image ready");
      return;
    }
    const t0 = Date.now();
    try {
      await this.capture(tpl, dir, onLog);
    } catch (err) {
      // Another server on this host may have committed the same image meanwhile.
      if (!this.ctx.runner.driver.isCompleteCheckpoint(dir)) throw err;
    }
    this.ready.set(revisionKey(tpl), dir);
    this.ctx.log.info({ template: tpl.id, ms: Date.now() - t0 }, "template warm image ready");
  }

  /** After a cold boot: the next create from this template should be a restore. */
  ensureInBackground(tpl: Template): void {
    const key = revisionKey(tpl);
    if (this.warming.has(key) || this.ctx.registry.isClosing) return;
    const p = this.ensure(tpl)
      .catch((err) => this.ctx.log.warn({ err, template: tpl.id }, "could not take a warm image"))
      .finally(() => this.warming.delete(key));
    this.warming.set(key, p);
  }

  /** Drops a deleted template's warm images. */
  forget(templateId: string): void {
    for (const k of [...this.ready.keys()]) if (k.startsWith(`${templateId}-r`)) this.ready.delete(k);
    const dir = this.ctx.paths.warmImages;
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      if (name.startsWith(`${templateId}-r`)) rmSync(this.ctx.paths.warmImage(name), { recursive: true, force: true });
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.warming.values()]);
  }

  private async capture(tpl: Template, finalDir: string, onLog?: (line: string) => void): Promise<void> {
    const live = templateSandbox(this.ctx.cfg, this.ctx.paths, this.ctx.runtimeDir, tpl);
    const runner = this.ctx.runner;
    try {
      // No token: the create that restores this image sets one.
      await runner.bring(
        live,
        { kind: "boot" },
        { envVars: tpl.env, defaultUser: tpl.user, defaultWorkdir: tpl.workdir },
      );
      if (live.slot) await runStartCommand(live.slot.slotIp, tpl, undefined, onLog);
      // Run a login shell once so the image holds bash and its libraries in the sentry's
      // page cache: the first command after every restore is then as fast as later ones.
      if (live.slot) await runLoginShellOnce(live.slot.slotIp);
      const tmp = `${finalDir}.tmp-${process.pid}`;
      mkdirSync(dirname(finalDir), { recursive: true });
      await runner.capture(live, tmp, { shared: true, leaveRunning: false });
      commitDir(tmp, finalDir);
    } finally {
      await runner.remove(live, false);
    }
  }
}
