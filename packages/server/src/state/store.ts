import type { NetworkSpec } from "../network/policy.js";

/** A volume mounted into a sandbox: by name in the API, by ID underneath (names are not reused while mounted). */
export interface SandboxVolumeMount {
  name: string;
  /** Mount point inside the sandbox. */
  path: string;
  volumeId: string;
}

/** What the node persists about a sandbox; enough to report, clean up and (later) resume it. */
export type SandboxState = "creating" | "running" | "paused" | "killing";

/** What a pause keeps: memory and processes (a checkpoint) or only the writable filesystem. */
export type PauseKind = "memory" | "filesystem";

/** What a fresh boot of a sandbox needs besides its tree: its template's settings. */
export interface BootSettings {
  env: Record<string, string>;
  user?: string;
  workdir?: string;
  startCmd?: string;
  readyCmd?: string;
}

/** Everything about a sandbox whatever its state. */
export interface SandboxFields {
  id: string;
  /** The API key that made it (absent: the operator's): only that key and the operator see it. */
  owner?: string;
  templateId: string;
  alias: string;
  clientId: string;
  /** The client's envd access token (never inside the sandbox: orchestrator/envd-credentials.ts). */
  envdToken: string;
  /** "host": envd holds the host token derived from envdToken; absent: it holds envdToken itself. */
  envdCredential?: "host";
  startedAt: number;
  endAt: number;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  metadata: Record<string, string>;
  envVars: Record<string, string>;
  allowInternet: boolean;
  /** Outbound rules and ingress options (E2B `network`); replaced by PUT /network. */
  network?: NetworkSpec;
  /** Fingerprint of the egress CA installed in its filesystem (network rules need it). */
  egressCa?: string;
  /** With allowPublicTraffic: false, what the proxy requires in e2b-traffic-access-token. */
  trafficToken?: string;
  autoPause: boolean;
  autoResume: boolean;
  /** false: TTL expiry pauses filesystem-only (E2B `autoPauseMemory`); absent means true. */
  autoPauseMemory?: boolean;
  /** Its template's boot settings: a resume from a filesystem-only pause boots afresh. */
  boot?: BootSettings;
  slotIndex: number | null;
  dir: string;
  /**
   * ID of the current runtime sandbox: the sandbox ID plus a per-start suffix, so a resume
   * need not wait for the previous incarnation's removal. Fixed length (runsc matches prefixes).
   */
  runtimeId: string;
  /** Template root filesystem the sandbox runs on (restores need the same one). */
  rootfs: string;
  /** The /.aenv folder it was started with (restores need the same one). */
  runtimeDir: string;
  /** Volumes bind-mounted read-write; a restore (resume, fork) needs the same mount points. */
  volumeMounts?: SandboxVolumeMount[];
}

/** What only a paused sandbox has: where its image is, how it was taken, the time it had left. */
export interface PauseFields {
  /** Complete pause image (checkpoint or filesystem layer, by kind), or where it is being written. */
  imageDir?: string;
  /** What imageDir holds (absent: memory, the default). */
  kind?: PauseKind;
  /** TTL left when paused: paused time does not count. */
  ttlLeftMs?: number;
  /**
   * Paused by idleness, not by a client (hibernation's saved tier): the API shows it running,
   * its TTL (endAt) keeps counting, and its next use resumes it. Absent for a client's pause.
   */
  idleSaved?: boolean;
  /** When the pause was taken (retention counts from it). */
  at?: number;
  /**
   * Paused (its tasks stopped in place, the client answered) while its image is still being
   * written: recovery after a crash finishes the image from the live runtime if it is there.
   */
  imagePending?: boolean;
  /** Bytes its pause image takes on this node (retention's disk total). */
  bytes?: number;
  /**
   * Names this pause (new at every pause): in a cluster, the node that resumes it claims
   * `<id>.<tag>` in the repository, so one pause image is resumed once, by one node.
   */
  tag?: string;
}

/**
 * What the node keeps about a sandbox, by state: only a paused one has a pause (its image,
 * kind, tag, TTL left). orchestrator/sandbox-states.ts is the one place a state changes.
 */
export type SandboxRecord =
  | (SandboxFields & { state: "creating" | "running" | "killing"; pause?: undefined })
  | (SandboxFields & { state: "paused"; pause: PauseFields });

export type PausedSandboxRecord = Extract<SandboxRecord, { state: "paused" }>;

/** A named capture of a running sandbox; usable as a templateID. */
export interface SnapshotRecord {
  id: string;
  /** The API key whose sandbox it was taken of (absent: the operator's). */
  owner?: string;
  names: string[];
  sandboxId: string;
  templateId: string;
  alias: string;
  rootfs: string;
  runtimeDir: string;
  imageDir: string;
  /** The token envd inside the image holds (envdTokenOf its source): authorises re-initialising starts from it. */
  envdToken: string;
  envVars: Record<string, string>;
  /** The source's network settings: the default of sandboxes started from it. */
  network?: NetworkSpec;
  allowInternet?: boolean;
  /** Volumes mounted when it was taken: sandboxes started from it need mounts at the same paths. */
  volumeMounts?: SandboxVolumeMount[];
  /** The source sandbox's boot settings (its template's), passed on to sandboxes started from it. */
  boot?: BootSettings;
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  sizeBytes: number;
  createdAt: number;
  /** Runtime the image was taken with (runsc version, platform, /.aenv contents). */
  imageKey?: string;
  /** What committing it to the repository stored: compressed bytes written (new chunks only). */
  uploadedBytes?: number;
  /** In the repository (other servers can use it); until then only this node's copy exists. */
  committed?: boolean;
}

/** The seam for node-local state: SQLite here, Redis-backed views come with clustering. */
export interface StateStore {
  /**
   * Written before it returns (a crash of the server process loses nothing); `sync` also waits
   * for the disk, so the write survives the loss of the host too.
   */
  put(rec: SandboxRecord, sync: boolean): void;
  delete(id: string, sync: boolean): void;
  get(id: string): SandboxRecord | undefined;
  all(): SandboxRecord[];
  close(): void;
}
