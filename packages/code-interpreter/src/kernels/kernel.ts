import type { ExecuteLine } from "@aenv/protocol/code-interpreter";

/** Where a cell's output goes, line by line, as it is produced. */
export type Sink = (line: ExecuteLine) => void;

/**
 * One context's interpreter: runs cells one at a time, keeping state between them. A cell is
 * ended by its kernel (idle), by `signal` (the client went away or timed out: the cell is
 * interrupted and the kernel stays usable), or by the kernel dying (an error line; the next
 * cell gets a fresh kernel).
 */
export interface Kernel {
  readonly language: string;
  /** env: per-run variables, set for this cell only. */
  execute(code: string, env: Record<string, string>, sink: Sink, signal: AbortSignal): Promise<void>;
  /** Sets sandbox-wide variables for every later cell (from envd's /envs). */
  setEnv(env: Record<string, string>): Promise<void>;
  /** Reseeds the language's pseudo-random generators from the OS (after a fork or restore). */
  reseed(): Promise<void>;
  /** A fresh interpreter in the same working directory. */
  restart(): Promise<void>;
  shutdown(): Promise<void>;
}

/** Runs one task at a time, in order: cells of one context never interleave. */
export class Queue {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(task: () => Promise<T>): Promise<T> {
    const next = this.tail.then(task, task);
    this.tail = next.catch(() => undefined);
    return next;
  }
}
