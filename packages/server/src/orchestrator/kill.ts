import { NotFoundError } from "@aenv/edge/errors";
import type { Logger } from "pino";
import type { LifecycleEvents } from "./lifecycle-events.js";
import type { PauseCommits } from "./pause-commits.js";
import type { SandboxRegistry } from "./registry.js";
import type { SandboxRunner } from "./runner.js";
import type { SandboxStates } from "./sandbox-states.js";

/**
 * Kill: the one way a sandbox is removed for good (a client's kill, a TTL with autoPause off,
 * retention, a graceful stop), and who hears of it once it is gone (metrics, hibernation, logs).
 */
export class Killer {
  private readonly listeners: Array<(id: string) => void> = [];

  constructor(
    private readonly d: {
      registry: SandboxRegistry;
      states: SandboxStates;
      runner: SandboxRunner;
      commits: Pick<PauseCommits, "forget">;
      events: LifecycleEvents;
      log: Logger;
    },
  ) {}

  onKilled(fn: (id: string) => void): void {
    this.listeners.push(fn);
  }

  async kill(id: string): Promise<void> {
    const { registry } = this.d;
    const l = registry.get(id);
    if (!l || l.rec.state === "killing" || l.rec.state === "creating") {
      throw new NotFoundError(`sandbox '${id}' not found`);
    }
    await registry.enqueue(l, async () => {
      if (!registry.has(id)) return;
      const wasPaused = l.rec.state === "paused";
      this.d.states.killing(l.rec);
      await this.d.runner.remove(l, true);
      if (wasPaused) this.d.commits.forget(id);
      for (const fn of this.listeners) fn(id);
      this.d.log.info({ sandboxID: id }, "sandbox killed");
      this.d.events.emit("killed", l.rec);
    });
  }
}
