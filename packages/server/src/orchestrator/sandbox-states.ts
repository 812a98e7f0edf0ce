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
 * module asks this one. A transition that the API reports as done is stored (SQLite,
 * synchronous) before the call returns; `killing` alone is memory only, since a kill
 * interrupted by a crash is finished by recovery from the record as it was.
 */
export class SandboxStates {
  constructor(private readonly store: StateStore) {}

  /** Persists what changed on the record without a change of state (TTL, slot, network). */
  save(rec: SandboxRecord): void {
    this.store.put(rec);
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
    this.store.put(rec);
  }

  /** paused → running until `endAt`: what only a pause had goes. */
  resumed(rec: SandboxRecord, endAt: number): void {
    this.running(rec, endAt);
  }

  private running(rec: SandboxRecord, endAt: number): void {
    const r = changing(rec);
    r.state = "running";
    r.pause = undefined;
    r.endAt = endAt;
    this.store.put(rec);
  }

  /** A pause answered early has its image now (`imageDir`, of `bytes`). */
  imageWritten(rec: PausedSandboxRecord, imageDir: string, bytes: number): void {
    rec.pause = { ...rec.pause, imageDir, kind: "memory", bytes, imagePending: undefined };
    this.store.put(rec);
  }

  /**
   * A sandbox hibernation had saved becomes its client's pause (a pause call, its TTL's end):
   * shown paused from now on, its TTL stopped with what it had left.
   */
  savedNowPaused(rec: PausedSandboxRecord): void {
    rec.pause = { ...rec.pause, idleSaved: undefined, ttlLeftMs: Math.max(0, rec.endAt - Date.now()), at: Date.now() };
    this.store.put(rec);
  }

  /** A paused sandbox's TTL is set (it counts from its resume). */
  pausedTtl(rec: PausedSandboxRecord, ttlLeftMs: number): void {
    rec.pause = { ...rec.pause, ttlLeftMs };
    this.store.put(rec);
  }

  /** What retention counts a pause by, filled in for one recorded without it. */
  measured(rec: PausedSandboxRecord, at: number, bytes: number): void {
    rec.pause = { ...rec.pause, at, bytes };
    this.store.put(rec);
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
    this.store.delete(id);
  }
}
