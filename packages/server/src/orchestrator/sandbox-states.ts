import type {
  PausedSandboxRecord,
  PauseFields,
  PauseKind,
  SandboxFields,
  SandboxRecord,
  SandboxState,
  StateStore,
} from "../state/store.js";

/** What a pause records when it is taken. */
export interface PauseTaken {
  imageDir: string;
  kind: PauseKind;
  tag: string;
  bytes: number | undefined;
  /** The image is still being written (a pause answered early). */
  imagePending?: boolean;
  /** Saved by hibernation: paused on disk, running to its client. */
  idleSaved?: boolean;
}

/** The record as this module changes it: the union's members are what it leaves behind. */
type Changing = SandboxFields & { state: SandboxState; pause?: PauseFields };
const changing = (rec: SandboxRecord) => rec as Changing;

/**
 * The one place a sandbox's state changes and its record is persisted: every lifecycle
 * module asks this one. A transition that the API reports as done is stored (SQLite) before
 * the call returns, so a crash of the server process loses none; `killing` alone is memory
 * only, since a kill interrupted by a crash is finished by recovery from the record as it was.
 *
 * Only what must outlive the host waits for the disk (an fsync, ~1 ms here, blocking the event
 * loop): a paused record, the step out of a pause, and dropping a record that was stored
 * paused. A running sandbox dies with its host, so its record (a create writes it three
 * times, a kill drops it) is never waited for: after a power loss it is either gone or
 * found running without a runtime, which recovery cleans up the same way.
 */
export class SandboxStates {
  /** Sandboxes whose stored record is not paused (they have no copy the host's loss must keep). */
  private readonly volatile = new Set<string>();

  constructor(private readonly store: StateStore) {}

  private put(rec: SandboxRecord, sync = rec.state === "paused"): void {
    this.store.put(rec, sync);
    if (rec.state === "paused") this.volatile.delete(rec.id);
    else this.volatile.add(rec.id);
  }

  /** Persists what changed on the record without a change of state (TTL, slot, network). */
  save(rec: SandboxRecord): void {
    this.put(rec);
  }

  /** creating → running: a create, a pool claim or a fork's child is up until `endAt`. */
  started(rec: SandboxRecord, endAt: number): void {
    this.running(rec, endAt);
  }

  /** running → paused, with what the pause took; `ttlLeftMs` is the time it had left. */
  paused(rec: SandboxRecord, ttlLeftMs: number, t: PauseTaken): void {
    const r = changing(rec);
    r.state = "paused";
    r.pause = {
      imageDir: t.imageDir,
      kind: t.kind,
      tag: t.tag,
      at: Date.now(),
      ttlLeftMs,
      ...(t.bytes !== undefined ? { bytes: t.bytes } : {}),
      ...(t.imagePending ? { imagePending: true } : {}),
      ...(t.idleSaved ? { idleSaved: true } : {}),
    };
    this.put(rec);
  }

  /** paused → running until `endAt`: what only a pause had goes. */
  resumed(rec: SandboxRecord, endAt: number): void {
    this.running(rec, endAt, true);
  }

  private running(rec: SandboxRecord, endAt: number, fromPause = false): void {
    const r = changing(rec);
    r.state = "running";
    r.pause = undefined;
    r.endAt = endAt;
    this.put(rec, fromPause);
  }

  /** A pause answered early has its image now (`imageDir`, of `bytes`). */
  imageWritten(rec: PausedSandboxRecord, imageDir: string, bytes: number): void {
    rec.pause = { ...rec.pause, imageDir, kind: "memory", bytes, imagePending: undefined };
    this.put(rec);
  }

  /**
   * A sandbox hibernation had saved becomes its client's pause (a pause call, its TTL's end):
   * shown paused from now on, its TTL stopped with what it had left.
   */
  savedNowPaused(rec: PausedSandboxRecord): void {
    rec.pause = { ...rec.pause, idleSaved: undefined, ttlLeftMs: Math.max(0, rec.endAt - Date.now()), at: Date.now() };
    this.put(rec);
  }

  /** A paused sandbox's TTL is set (it counts from its resume). */
  pausedTtl(rec: PausedSandboxRecord, ttlLeftMs: number): void {
    rec.pause = { ...rec.pause, ttlLeftMs };
    this.put(rec);
  }

  /** What retention counts a pause by, filled in for one recorded without it. */
  measured(rec: PausedSandboxRecord, at: number, bytes: number): void {
    rec.pause = { ...rec.pause, at, bytes };
    this.put(rec);
  }

  /** A pause taken over from the repository or found after a restart: where its image goes here. */
  imageAt(rec: PausedSandboxRecord, imageDir: string): void {
    rec.pause = { ...rec.pause, imageDir };
  }

  /** → killing: no lifecycle step may start on it any more (memory only, see the class). */
  killing(rec: SandboxRecord): void {
    const r = changing(rec);
    r.state = "killing";
    r.pause = undefined;
  }

  /** The record goes: the sandbox is gone from this node (killed, or owned elsewhere now). */
  forget(id: string): void {
    this.store.delete(id, !this.volatile.has(id));
    this.volatile.delete(id);
  }
}
