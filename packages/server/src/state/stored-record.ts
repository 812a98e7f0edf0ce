import type { PauseFields, PauseKind, SandboxFields, SandboxRecord, SandboxState } from "./store.js";

/**
 * A sandbox record as it is written down (the node's SQLite, a pause manifest's meta): one flat
 * object, its pause fields beside the rest. Every version of the server reads and writes this
 * shape, so a node upgraded in place, or one of another version in a rolling upgrade, reads
 * what another wrote; only memory holds the typed record.
 */
export interface StoredSandboxRecord extends SandboxFields {
  state: SandboxState;
  imageDir?: string;
  pauseKind?: PauseKind;
  ttlLeftMs?: number;
  idleSaved?: boolean;
  pausedAt?: number;
  imagePending?: boolean;
  pauseBytes?: number;
  pauseTag?: string;
}

const defined = <T extends object>(o: T): T =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;

export function toStored(rec: SandboxRecord): StoredSandboxRecord {
  const { pause, ...rest } = rec;
  if (!pause) return { ...rest };
  return {
    ...rest,
    ...defined({
      imageDir: pause.imageDir,
      pauseKind: pause.kind,
      ttlLeftMs: pause.ttlLeftMs,
      idleSaved: pause.idleSaved,
      pausedAt: pause.at,
      imagePending: pause.imagePending,
      pauseBytes: pause.bytes,
      pauseTag: pause.tag,
    }),
  };
}

/** The typed record; pause fields a record not paused still carries (older writers) are dropped. */
export function fromStored(s: StoredSandboxRecord): SandboxRecord {
  const { imageDir, pauseKind, ttlLeftMs, idleSaved, pausedAt, imagePending, pauseBytes, pauseTag, state, ...rest } = s;
  if (state !== "paused") return { ...rest, state };
  const pause: PauseFields = defined({
    imageDir,
    kind: pauseKind,
    ttlLeftMs,
    idleSaved,
    at: pausedAt,
    imagePending,
    bytes: pauseBytes,
    tag: pauseTag,
  });
  return { ...rest, state, pause };
}
