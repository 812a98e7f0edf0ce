import { AtCapacityError, NotFoundError, ShuttingDownError } from "@aenv/edge/errors";
import type { Slot } from "../network/slots.js";
import type { Freezer, SandboxLaunch } from "../runtime/driver.js";
import type { SandboxRecord } from "../state/store.js";
import type { MetricSample } from "./metrics.js";

/** A sandbox this node holds (running, paused, or on its way), with its in-memory state. */
export interface Live {
  rec: SandboxRecord;
  slot?: Slot;
  /** Serialises lifecycle operations on one sandbox. */
  op: Promise<unknown>;
  /** Bumped when a lifecycle operation is queued and when it ends (see Lifetimes.sweepDead). */
  opEpoch?: number;
  /** Lifecycle operations queued or running. */
  opsPending?: number;
  /** The pause/resume in flight, joined by identical concurrent calls. */
  inflight?: { kind: "pause" | "resume"; p: Promise<unknown> };
  /** Set while a capture is running: proxied traffic waits for it. */
  gate?: Promise<unknown>;
  /** The last metrics sample taken while it ran (served while it is hibernated). */
  lastMetric?: MetricSample;
  /** Frozen in place by hibernation (still "running" to clients); thawed before any use. */
  hibernated?: boolean;
  /** Internal helper sandbox (template capture or build): never persisted or listed. */
  ephemeral?: boolean;
  /** Template builds: writable rootfs and staging mounts. */
  launchExtras?: Pick<SandboxLaunch, "writableRootfs" | "readOnlyMounts">;
  /**
   * Suspended in place by a pause whose image is not (or no longer needed to be) written:
   * its runtime still holds its memory; `release` lets go of envd's address.
   */
  suspended?: { release: () => void };
  /** Admitted to start from a pause: holds its share of the node until it runs or fails. */
  admitted?: boolean;
}

/** What a sandbox holds of its node while it runs or starts. */
export interface Demand {
  cpuCount: number;
  memoryMB: number;
}

/** The node's totals: sandboxes, and the sum of their memory and vCPUs. */
export interface NodeBudget {
  maxSandboxes: number;
  maxMemoryMB: number;
  maxCpus: number;
}

/**
 * The core every lifecycle module shares: which sandboxes live here, one operation at a time
 * per sandbox, and admission against the node's capacity.
 */
export class SandboxRegistry {
  private readonly live = new Map<string, Live>();
  private closing = false;

  /**
   * `freezer`: the driver's, when it can freeze a sandbox in place (hibernation freezes; the
   * thaw is here because every queued operation and all traffic pass through `wake`).
   */
  constructor(
    private readonly budget: NodeBudget,
    private readonly freezer?: Freezer,
  ) {}

  /** Thaws a sandbox hibernation froze; every queued operation and all traffic go through it. */
  async wake(l: Live): Promise<void> {
    if (!l.hibernated) return;
    l.hibernated = false;
    await this.freezer?.thaw(l.rec.runtimeId);
  }

  get isClosing(): boolean {
    return this.closing;
  }

  /** From now on, new work is refused (ShuttingDownError). */
  close(): void {
    this.closing = true;
  }

  assertOpen(): void {
    if (this.closing) throw new ShuttingDownError("server is shutting down");
  }

  get(id: string): Live | undefined {
    return this.live.get(id);
  }

  has(id: string): boolean {
    return this.live.has(id);
  }

  add(l: Live): void {
    this.live.set(l.rec.id, l);
  }

  remove(id: string): void {
    this.live.delete(id);
  }

  all(): Live[] {
    return [...this.live.values()];
  }

  /** A sandbox a client may act on: not being created or killed. */
  mustGet(id: string): Live {
    const l = this.live.get(id);
    if (!l || l.rec.state === "killing" || l.rec.state === "creating") {
      throw new NotFoundError(`sandbox '${id}' not found`);
    }
    return l;
  }

  /** What clients see: running and paused sandboxes. */
  list(): SandboxRecord[] {
    return this.all()
      .map((l) => l.rec)
      .filter((r) => r.state === "running" || r.state === "paused");
  }

  /** A sandbox holds its share while it runs, starts, or is admitted to resume. */
  private holds(l: Live): boolean {
    return l.rec.state === "running" || l.rec.state === "creating" || l.admitted === true;
  }

  /** What running, starting and resuming sandboxes hold now. */
  usage(): { sandboxes: number; memoryMB: number; cpus: number } {
    const u = { sandboxes: 0, memoryMB: 0, cpus: 0 };
    for (const l of this.live.values()) {
      if (!this.holds(l)) continue;
      u.sandboxes++;
      u.memoryMB += l.rec.memoryMB;
      u.cpus += l.rec.cpuCount;
    }
    return u;
  }

  /**
   * Throws AtCapacityError unless one more sandbox needing `need` fits. Synchronous, and
   * callers take their share in the same step (addAdmitted, admit): no await between the
   * check and the hold, so parallel starts cannot all pass on the same free room.
   */
  checkRoom(need: Demand = { cpuCount: 0, memoryMB: 0 }): void {
    const u = this.usage();
    const b = this.budget;
    const hint = "kill or pause some first";
    if (u.sandboxes + 1 > b.maxSandboxes) {
      throw new AtCapacityError(`node is at capacity (${b.maxSandboxes} sandboxes); ${hint}`);
    }
    if (u.memoryMB + need.memoryMB > b.maxMemoryMB) {
      throw new AtCapacityError(
        `node memory budget exceeded: ${u.memoryMB} of ${b.maxMemoryMB} MB held, this sandbox needs ${need.memoryMB} MB; ${hint}`,
      );
    }
    if (u.cpus + need.cpuCount > b.maxCpus) {
      throw new AtCapacityError(
        `node CPU budget exceeded: ${u.cpus} of ${b.maxCpus} vCPUs held, this sandbox needs ${need.cpuCount}; ${hint}`,
      );
    }
  }

  /** Registers a new (creating) sandbox if its sizing fits; it holds its share from now on. */
  addAdmitted(l: Live): void {
    this.checkRoom(l.rec);
    this.add(l);
  }

  /** Admits a registered sandbox about to start again (resume): it holds its share until release(). */
  admit(l: Live): void {
    if (this.holds(l)) return;
    this.checkRoom(l.rec);
    l.admitted = true;
  }

  release(l: Live): void {
    l.admitted = undefined;
  }

  /** Runs fn after every operation queued on this sandbox before it. */
  enqueue<T>(l: Live, fn: () => Promise<T>): Promise<T> {
    l.opEpoch = (l.opEpoch ?? 0) + 1;
    l.opsPending = (l.opsPending ?? 0) + 1;
    const run = async () => {
      await this.wake(l);
      return fn();
    };
    const p = l.op.then(run, run);
    l.op = p
      .catch(() => {})
      .finally(() => {
        l.opEpoch = (l.opEpoch ?? 0) + 1;
        l.opsPending = (l.opsPending ?? 1) - 1;
      });
    return p;
  }

  /** Identical concurrent calls (two pauses, two resumes) share the operation in flight. */
  joinOrRun<T>(l: Live, kind: "pause" | "resume", fn: () => Promise<T>): Promise<T> {
    if (l.inflight?.kind === kind) return l.inflight.p as Promise<T>;
    const p = this.enqueue(l, fn);
    const entry = { kind, p };
    l.inflight = entry;
    const clear = () => {
      if (l.inflight === entry) l.inflight = undefined;
    };
    p.then(clear, clear);
    return p;
  }
}
