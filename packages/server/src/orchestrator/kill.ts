import { NotFoundError } from "@aenv/edge/errors";
import type { NodeContext } from "./node-context.js";
import type { PauseCommits } from "./pause-commits.js";

/**
 * Kill: the one way a sandbox is removed for good (a client's kill, a TTL with autoPause off,
 * retention, a graceful stop), and who hears of it once it is gone (metrics, hibernation, logs).
 */
export class Killer {
  private readonly listeners: Array<(id: string) => void> = [];

  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: { commits: Pick<PauseCommits, "forget"> },
  ) {}

  onKilled(fn: (id: string) => void): void {
    this.listeners.push(fn);
  }

  async kill(id: string): Promise<void> {
    const { registry } = this.ctx;
    const l = registry.get(id);
    if (!l || l.rec.state === "killing" || l.rec.state === "creating") {
      throw new NotFoundError(`sandbox '${id}' not found`);
    }
    await registry.enqueue(l, async () => {
      if (!registry.has(id)) return;
      const wasPaused = l.rec.state === "paused";
      this.ctx.states.killing(l.rec);
      await this.ctx.runner.remove(l, true);
      if (wasPaused) this.uses.commits.forget(id);
      for (const fn of this.listeners) fn(id);
      this.ctx.log.info({ sandboxID: id }, "sandbox killed");
      this.ctx.events.emit("killed", l.rec);
    });
  }
}
