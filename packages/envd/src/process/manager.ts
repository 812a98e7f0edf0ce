/** Registry of processes: live ones by pid, plus the exit status of recently finished ones. */
import { Code, ConnectError } from "@connectrpc/connect";
import { type Listener, ProcessHandle, type SpawnSpec } from "./handle.js";
import type { Spawner } from "./spawner.js";

const MAX_EXITED = 2000;

export type Selector =
  | { case: "pid"; value: number }
  | { case: "tag"; value: string }
  | { case: undefined; value?: undefined };

export class ProcessManager {
  private readonly live = new Map<number, ProcessHandle>();
  private readonly exited = new Map<number, ProcessHandle>();

  /** With a spawner, pipe processes start through the vfork helper. */
  constructor(private readonly spawner?: Spawner) {}

  async start(spec: SpawnSpec, first?: Listener): Promise<ProcessHandle> {
    const h = await ProcessHandle.spawn(spec, first, this.spawner);
    this.exited.delete(h.pid);
    this.live.set(h.pid, h);
    h.onExit(() => {
      if (this.live.get(h.pid) === h) this.live.delete(h.pid);
      this.exited.delete(h.pid);
      this.exited.set(h.pid, h);
      while (this.exited.size > MAX_EXITED) {
        const oldest = this.exited.keys().next().value;
        if (oldest === undefined) break;
        this.exited.delete(oldest);
      }
    });
    return h;
  }

  list(): ProcessHandle[] {
    return [...this.live.values()];
  }

  private describe(sel: Selector | undefined): string {
    if (sel?.case === "pid") return `process with pid ${sel.value} not found`;
    if (sel?.case === "tag") return `process with tag ${sel.value} not found`;
    return "process selector is required";
  }

  /** A live process, or not_found. */
  getLive(sel: Selector | undefined): ProcessHandle {
    const h = this.find(sel, false);
    if (!h) throw new ConnectError(this.describe(sel), sel?.case ? Code.NotFound : Code.InvalidArgument);
    return h;
  }

  /** A live or recently finished process, or not_found. */
  getAny(sel: Selector | undefined): ProcessHandle {
    const h = this.find(sel, true);
    if (!h) throw new ConnectError(this.describe(sel), sel?.case ? Code.NotFound : Code.InvalidArgument);
    return h;
  }

  private find(sel: Selector | undefined, includeExited: boolean): ProcessHandle | undefined {
    if (sel?.case === "pid") {
      return this.live.get(sel.value) ?? (includeExited ? this.exited.get(sel.value) : undefined);
    }
    if (sel?.case === "tag") {
      for (const h of this.live.values()) if (h.tag === sel.value) return h;
      if (includeExited) {
        const all = [...this.exited.values()].reverse();
        return all.find((h) => h.tag === sel.value);
      }
    }
    return undefined;
  }

  /** SIGKILL everything (shutdown). */
  killAll(): void {
    for (const h of this.live.values()) h.signal("SIGKILL");
  }

  /** Everything killed and the spawn helper stopped. */
  close(): void {
    this.killAll();
    this.spawner?.close();
  }
}
