import type { Logger } from "pino";

interface Step {
  what: string;
  undo: () => unknown;
}

/**
 * The undo steps of something built in steps (a sandbox's start): each step that acquires a
 * resource pushes its undo right where it acquires it, so a failure at any point finds
 * exactly what was taken. `unwind()` runs them newest first; a step that fails is logged and
 * the rest still run (a slot not released must not keep a record alive). `release()` drops
 * them once the whole has an owner that removes it another way (a running sandbox is removed
 * by a kill).
 */
export class CleanupStack {
  private steps: Step[] = [];

  constructor(
    private readonly log: Logger,
    /** Logged with a failed step (the sandbox's ID). */
    private readonly bindings: Record<string, unknown> = {},
  ) {}

  /** How many undo steps are held. */
  get size(): number {
    return this.steps.length;
  }

  defer(what: string, undo: () => unknown): void {
    this.steps.push({ what, undo });
  }

  /** Runs every held step, newest first, each awaited; the stack is empty afterwards. */
  async unwind(): Promise<void> {
    const steps = this.steps.reverse();
    this.steps = [];
    for (const s of steps) {
      try {
        await s.undo();
      } catch (err) {
        this.log.warn({ err, ...this.bindings, step: s.what }, "rollback step failed");
      }
    }
  }

  /** Success: nothing is undone. */
  release(): void {
    this.steps = [];
  }
}
