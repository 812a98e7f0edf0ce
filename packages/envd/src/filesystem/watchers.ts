/** Polling watchers (CreateWatcher / GetWatcherEvents / RemoveWatcher). */
import { randomUUID } from "node:crypto";
import { Code, ConnectError } from "@connectrpc/connect";
import type { DirWatcher, WatchEvent } from "./watch.js";

const MAX_BUFFERED = 10_000;
/** Watchers nobody polled for this long are removed. */
const IDLE_MS = 30 * 60_000;

interface Entry {
  watcher: DirWatcher;
  events: WatchEvent[];
  lastPoll: number;
}

export class WatcherRegistry {
  private readonly byId = new Map<string, Entry>();
  private sweeper: NodeJS.Timeout | undefined;

  /** `make(push)` creates (and starts) the watcher that feeds `push`. */
  async create(make: (push: (ev: WatchEvent) => void) => Promise<DirWatcher>): Promise<string> {
    const id = randomUUID();
    const events: WatchEvent[] = [];
    const watcher = await make((ev) => {
      if (events.length >= MAX_BUFFERED) events.shift();
      events.push(ev);
    });
    this.byId.set(id, { watcher, events, lastPoll: Date.now() });
    this.sweeper ??= setInterval(() => this.sweep(), 60_000).unref();
    return id;
  }

  drain(id: string): WatchEvent[] {
    const e = this.get(id);
    e.lastPoll = Date.now();
    return e.events.splice(0);
  }

  remove(id: string): void {
    const e = this.get(id);
    e.watcher.close();
    this.byId.delete(id);
  }

  closeAll(): void {
    for (const e of this.byId.values()) e.watcher.close();
    this.byId.clear();
  }

  private get(id: string): Entry {
    const e = this.byId.get(id);
    if (!e) throw new ConnectError(`watcher with id ${id} not found`, Code.NotFound);
    return e;
  }

  private sweep(): void {
    const now = Date.now();
    for (const [id, e] of this.byId) {
      if (now - e.lastPoll > IDLE_MS) {
        e.watcher.close();
        this.byId.delete(id);
      }
    }
  }
}
