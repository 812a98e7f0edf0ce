import { DEFAULT_WINDOW_S, limitRules } from "@aenv/edge/limit-rules";
import type { Tenant } from "@aenv/edge/tenants";

/**
 * A node's own enforcement of key limits, when it is not behind gateways (they enforce them
 * cluster-wide in Redis): creates a second as a token bucket, calls as a fixed window, and
 * concurrent sandboxes from the node's own count.
 */
export class LocalKeyLimits {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly windows = new Map<string, { start: number; calls: number }>();
  private readonly pending = new Map<string, number>();

  constructor(private readonly running: (owner: string) => number) {}

  /** One API call of `t`: refused past its calls per window. */
  call(t: Tenant): void {
    const l = t.limits;
    if (!l?.callsPerWindow) return;
    const span = (l.windowSeconds ?? DEFAULT_WINDOW_S) * 1000;
    const now = Date.now();
    let w = this.windows.get(t.id);
    if (!w || now - w.start >= span) {
      w = { start: now - (now % span), calls: 0 };
      this.windows.set(t.id, w);
    }
    if (w.calls >= l.callsPerWindow) throw limitRules.calls(t, Math.max(1, Math.ceil((w.start + span - now) / 1000)));
    w.calls++;
  }

  /**
   * Room for `n` sandboxes more of `t`; the returned function ends them (started or not).
   * `creates: false` (a resume) takes no token of the creates a second.
   */
  admitCreate(t: Tenant, n = 1, o: { creates?: boolean } = {}): () => void {
    const l = t.limits;
    if (!l) return () => {};
    const pending = this.pending.get(t.id) ?? 0;
    const over = limitRules.sandboxes(t, this.running(t.id), pending, n);
    if (over) throw over;
    if (l.createsPerSecond && o.creates !== false) {
      const rate = l.createsPerSecond;
      const now = performance.now();
      const b = this.buckets.get(t.id) ?? { tokens: Math.max(1, rate), at: now };
      b.tokens = Math.min(Math.max(1, rate), b.tokens + ((now - b.at) / 1000) * rate);
      b.at = now;
      this.buckets.set(t.id, b);
      if (b.tokens < n) throw limitRules.creates(t, Math.max(1, Math.ceil((n - b.tokens) / rate)));
      b.tokens -= n;
    }
    this.pending.set(t.id, pending + n);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.pending.get(t.id) ?? n) - n;
      if (left > 0) this.pending.set(t.id, left);
      else this.pending.delete(t.id);
    };
  }
}
