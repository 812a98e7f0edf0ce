/**
 * Server-stream plumbing: a push queue drained by an async generator that emits keepalives
 * after `keepaliveMs` of silence and stops (without throwing) when `signal` aborts.
 */
import { Code, ConnectError } from "@connectrpc/connect";

const DEFAULT_KEEPALIVE_S = 90;

/** `Keepalive-Ping-Interval` header in seconds → ms (default 90 s). */
export function keepaliveMs(headers: Headers): number {
  const raw = headers.get("keepalive-ping-interval");
  const n = raw == null ? Number.NaN : Number(raw);
  const s = Number.isFinite(n) && n > 0 ? n : DEFAULT_KEEPALIVE_S;
  return Math.min(s * 1000, 2_147_000_000);
}

export function isDeadline(reason: unknown): boolean {
  return reason instanceof ConnectError && reason.code === Code.DeadlineExceeded;
}

export class PushQueue<T> {
  private readonly items: T[] = [];
  private closed = false;
  private wake: (() => void) | undefined;
  /** Called after an item was taken off the queue (for flow control). */
  onShift: ((remaining: number) => void) | undefined;

  get length(): number {
    return this.items.length;
  }

  push(item: T): void {
    if (this.closed) return;
    this.items.push(item);
    this.notify();
  }

  /** No more items after the ones queued. */
  close(): void {
    this.closed = true;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /**
   * Drain the queue. `keepalive()` is yielded after `intervalMs` without items.
   * Ends when closed (after draining) or when `stop` aborts; `graceMs` lets a
   * deadline abort still deliver items that arrive within that time (e.g. the end
   * event of a process our own lifetime timer just killed).
   */
  async *drain(opts: {
    signal: AbortSignal;
    intervalMs: number;
    keepalive: () => T;
    graceOnDeadlineMs?: number;
  }): AsyncGenerator<T> {
    const { signal, intervalMs, keepalive } = opts;
    let stopAt: number | undefined;
    const onAbort = () => {
      const grace = isDeadline(signal.reason) ? (opts.graceOnDeadlineMs ?? 0) : 0;
      stopAt = Date.now() + grace;
      this.notify();
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    try {
      for (;;) {
        while (this.items.length > 0) {
          const item = this.items.shift() as T;
          this.onShift?.(this.items.length);
          yield item;
        }
        if (this.closed) return;
        const now = Date.now();
        if (stopAt !== undefined && now >= stopAt) return;
        const wait = stopAt !== undefined ? Math.min(stopAt - now, intervalMs) : intervalMs;
        const timedOut = await new Promise<boolean>((resolve) => {
          const t = setTimeout(() => {
            this.wake = undefined;
            resolve(true);
          }, wait);
          this.wake = () => {
            clearTimeout(t);
            resolve(false);
          };
        });
        if (timedOut && this.items.length === 0 && !this.closed && stopAt === undefined) {
          yield keepalive();
        }
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.wake = undefined;
    }
  }
}
