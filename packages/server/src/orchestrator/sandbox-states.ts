import type { PauseKind, SandboxRecord, StateStore } from "../state/store.js";

/** What a pause records beside the state: where its image is and how it was taken. */
export interface PauseFields {
  imageDir: string;
  pauseKind: PauseKind;
  pauseTag: string;
  pauseBytes: number | undefined;
  /** The image is still being written (a pause answered early). */
  imagePending?: boolean;
  /** Saved by hibernation: paused on disk, running to its client. */
  idleSaved?: boolean;
}

/**
 * The one place a sandbox's state changes and its record is persisted: every lifecycle
 * module asks this one. A transition that the API reports as done is stored (SQLite,
 * synchronous) before the call returns; `killing` alone is memory only, since a kill
 * interrupted by a crash is finished by recovery from the record as it was.
 */
export class SandboxStates {
  constructor(private readonly store: StateStore) {}

  /** Persists what changed on the record without a change of state (TTL, slot, network, image). */
  save(rec: SandboxRecord): void {
    this.store.put(rec);
  }

  /** creating → running: a create, a pool claim or a fork's child is up until `endAt`. */
  started(rec: SandboxRecord, endAt: number): void {
    rec.state = "running";
    rec.endAt = endAt;
    this.store.put(rec);
  }

  /** running → paused, with what the pause took; `ttlLeftMs` is the time it had left. */
  paused(rec: SandboxRecord, ttlLeftMs: number, f: PauseFields): void {
    rec.ttlLeftMs = ttlLeftMs;
    rec.state = "paused";
    rec.imageDir = f.imageDir;
    rec.pauseKind = f.pauseKind;
    rec.pauseTag = f.pauseTag;
    rec.pausedAt = Date.now();
    rec.pauseBytes = f.pauseBytes;
    rec.imagePending = f.imagePending;
    if (f.idleSaved) rec.idleSaved = true;
    this.store.put(rec);
  }

  /** paused → running until `endAt`: what only a pause had goes. */
  resumed(rec: SandboxRecord, endAt: number): void {
    rec.endAt = endAt;
    rec.idleSaved = undefined;
    rec.state = "running";
    rec.imageDir = undefined;
    rec.pauseKind = undefined;
    rec.ttlLeftMs = undefined;
    rec.pausedAt = undefined;
    rec.pauseBytes = undefined;
    rec.imagePending = undefined;
    this.store.put(rec);
  }

  /** → killing: no lifecycle step may start on it any more (memory only, see the class). */
  killing(rec: SandboxRecord): void {
    rec.state = "killing";
  }

  /** The record goes: the sandbox is gone from this node (killed, or owned elsewhere now). */
  forget(id: string): void {
    this.store.delete(id);
  }
}
