import { useEffect, useRef, useState } from "preact/hooks";

export interface Polled<T> {
  data?: T;
  error?: string;
  /** Asks again now (after an action), without waiting for the next tick. */
  refresh: () => void;
}

/**
 * Calls `load` now and every `everyMs` while mounted, one call at a time (a slow answer
 * delays the next tick instead of piling calls up). `deps` restart it.
 */
export function usePoll<T>(load: () => Promise<T>, everyMs: number, deps: unknown[]): Polled<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  const kick = useRef<() => void>(() => {});
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let running = false;
    const tick = async () => {
      if (stopped || running) return;
      running = true;
      clearTimeout(timer);
      try {
        const d = await load();
        if (!stopped) {
          setData(d);
          setError(undefined);
        }
      } catch (err) {
        if (!stopped) setError((err as Error).message);
      } finally {
        running = false;
        if (!stopped) timer = setTimeout(tick, everyMs);
      }
    };
    kick.current = () => void tick();
    void tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, deps);
  return { data, error, refresh: () => kick.current() };
}

export function ago(iso: string, now = Date.now()): string {
  return `${duration(now - Date.parse(iso))} ago`;
}

export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return "—";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function bytes(n: number): string {
  if (!Number.isFinite(n)) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

/** "1 node", "3 nodes". */
export function count(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}
