/**
 * Coalesces calls to `load` without ever answering from data older than the call: a caller
 * that arrives while a run is in flight waits for the next run (shared by everyone who
 * arrived meanwhile), because the run in flight may have started before what it asks about
 * existed. A burst of N calls costs at most two runs.
 */
export function freshSingleFlight<T>(load: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | undefined;
  let queued: Promise<T> | undefined;
  const start = (): Promise<T> => {
    const p = load();
    running = p;
    const clear = () => {
      if (running === p) running = undefined;
    };
    p.then(clear, clear);
    return p;
  };
  return () => {
    if (!running) return start();
    if (!queued) {
      const q = running.then(
        () => undefined,
        () => undefined,
      );
      queued = q.then(() => {
        queued = undefined;
        return start();
      });
    }
    return queued;
  };
}

/**
 * `load`'s answer reused for `ms` after its run started (callers meanwhile share that run);
 * a run that failed is not kept, so the next call runs again. `drop()` forgets the answer.
 * For reads where an answer up to `ms` old is good enough (unlike freshSingleFlight).
 */
export function cachedFor<T>(ms: number, load: () => Promise<T>): { get: () => Promise<T>; drop: () => void } {
  let kept: { at: number; value: Promise<T> } | undefined;
  return {
    get() {
      const now = performance.now();
      if (!kept || now - kept.at > ms) {
        const value = load();
        const entry = { at: now, value };
        kept = entry;
        value.catch(() => {
          if (kept === entry) kept = undefined;
        });
      }
      return kept.value;
    },
    drop() {
      kept = undefined;
    },
  };
}
