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
