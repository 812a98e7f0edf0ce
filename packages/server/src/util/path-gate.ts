interface PathState {
  holders: number;
  /** Resolves when the last holder lets go. */
  idle?: { promise: Promise<void>; resolve: () => void };
  /** The exclusive hold in progress (new holders wait for it). */
  exclusive?: Promise<void>;
}

/**
 * Shared holds on a path, and an exclusive one that waits for them and keeps new ones out: a
 * sandbox start holds its template tree's path while runsc opens it, and a tree swapped in
 * place under the same path (a lazy tree settled into a plain one) is swapped exclusively, so
 * no start opens the path in the moment it is an empty folder.
 */
export class PathGate {
  private readonly paths = new Map<string, PathState>();

  async shared<T>(path: string, fn: () => Promise<T>): Promise<T> {
    let s = this.state(path);
    while (s.exclusive) {
      await s.exclusive;
      s = this.state(path);
    }
    s.holders++;
    try {
      return await fn();
    } finally {
      s.holders--;
      if (s.holders === 0) {
        s.idle?.resolve();
        s.idle = undefined;
        if (!s.exclusive) this.paths.delete(path);
      }
    }
  }

  async exclusive<T>(path: string, fn: () => T | Promise<T>): Promise<T> {
    let s = this.state(path);
    while (s.exclusive) {
      await s.exclusive;
      s = this.state(path);
    }
    let done = () => {};
    s.exclusive = new Promise<void>((r) => {
      done = r;
    });
    try {
      if (s.holders > 0) {
        let resolve = () => {};
        const promise = new Promise<void>((r) => {
          resolve = r;
        });
        s.idle = { promise, resolve };
        await promise;
      }
      return await fn();
    } finally {
      s.exclusive = undefined;
      if (s.holders === 0) this.paths.delete(path);
      done();
    }
  }

  private state(path: string): PathState {
    let s = this.paths.get(path);
    if (!s) {
      s = { holders: 0 };
      this.paths.set(path, s);
    }
    return s;
  }
}
