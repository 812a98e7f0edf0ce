import { AtCapacityError } from "@aenv/edge/errors";

export interface StartGateOptions {
  /** Starts (boots or restores for a create) that run at once: about the node's cores. */
  concurrency: number;
  /**
   * The longest a create may expect to wait for its turn. Past it the create is refused at
   * once (503 with Retry-After) instead of queued: a start that waits behind a burst until
   * the client's request timeout helps nobody and holds memory meanwhile.
   */
  maxWaitMs: number;
  /** What a start is taken to cost before any was measured. */
  initialStartMs: number;
  /** Clock, for tests. */
  now?: () => number;
}

/** Weight of the newest start in the moving average of start times. */
const EWMA_ALPHA = 0.3;

/**
 * Admission of sandbox starts by time. A node's starts are CPU-bound: on 2 cores a burst of
 * 100 creates started at once finishes none of them in time (each took tens of seconds and
 * most hit the SDK's 60 s timeout). The gate runs `concurrency` starts at a time, queues
 * the next ones in arrival order while the wait they can expect (queue position × the
 * measured start time ÷ concurrency) stays within `maxWaitMs`, and refuses the rest at once
 * with an AtCapacityError that says when the queue will have drained.
 */
export class StartGate {
  private running = 0;
  private readonly queue: Array<() => void> = [];
  private startMs: number;
  private readonly now: () => number;

  constructor(private readonly o: StartGateOptions) {
    this.startMs = o.initialStartMs;
    this.now = o.now ?? (() => performance.now());
  }

  /** The moving average of start times (ms), as the gate judges waits by it. */
  get expectedStartMs(): number {
    return this.startMs;
  }

  /** Starts running and waiting now. */
  get load(): { running: number; queued: number } {
    return { running: this.running, queued: this.queue.length };
  }

  /** How long a start arriving now would wait for its turn (ms). */
  expectedWaitMs(): number {
    const ahead = this.running + this.queue.length - this.o.concurrency + 1;
    return ahead <= 0 ? 0 : (ahead * this.startMs) / this.o.concurrency;
  }

  /**
   * Runs `start` in its turn and learns from its duration; throws AtCapacityError at once,
   * without running it, when its turn is too far off.
   */
  async run<T>(start: () => Promise<T>): Promise<T> {
    if (this.running >= this.o.concurrency) {
      const waitMs = this.expectedWaitMs();
      if (waitMs > this.o.maxWaitMs) {
        // When the queue ahead will have drained: the soonest a retry can be let in.
        const drainS = Math.max(1, Math.ceil((waitMs - this.o.maxWaitMs) / 1000));
        throw new AtCapacityError(
          `node is starting ${this.running} sandboxes with ${this.queue.length} waiting (about ${Math.round(this.startMs)} ms each); retry in ${drainS} s`,
          drainS,
        );
      }
      await new Promise<void>((r) => this.queue.push(r));
    } else {
      this.running++;
    }
    const t0 = this.now();
    let ok = false;
    try {
      const out = await start();
      ok = true;
      return out;
    } finally {
      // Failed starts often fail fast: they would teach the gate that starts are cheap.
      if (ok) this.startMs += EWMA_ALPHA * (this.now() - t0 - this.startMs);
      const next = this.queue.shift();
      if (next) next();
      else this.running--;
    }
  }
}
