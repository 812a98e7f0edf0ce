/**
 * The seam between the orchestrator and an isolation technology. gVisor implements it on
 * hosts without KVM; a microVM driver will implement it where /dev/kvm exists.
 * Images are specific to the driver, its version and platform.
 */
export interface SandboxLaunch {
  /** Fixed-length unique ID (runsc matches IDs by prefix). */
  id: string;
  /**
   * Template root filesystem; never written to unless writableRootfs. Also bound read-only at
   * SANDBOX_LOWER_DIR (not in builds): envd diffs / against it for a filesystem-only pause.
   */
  rootfs: string;
  /**
   * Template builds only: writes go straight to the rootfs directory (no per-sandbox
   * writable layer), so build steps change the template itself. Not checkpointable.
   */
  writableRootfs?: boolean;
  /** Extra read-only host directories, by mount point (template builds' COPY staging). */
  readOnlyMounts?: Record<string, string>;
  /** Host directories bind-mounted read-write (volumes), shared with the host and other sandboxes. */
  volumeMounts?: Array<{ destination: string; source: string }>;
  /** Per-sandbox host directory: bundle, writable-layer store, logs. */
  dir: string;
  /** Network namespace the sandbox joins (already addressed). */
  netnsPath: string;
  /**
   * The host's address of the sandbox's envd (its slot address). Drivers that give the
   * sandbox its own network namespace reach it through the slot and ignore this; the sim
   * driver listens here itself.
   */
  envdAddress?: string;
  cpuCount: number;
  memoryMB: number;
  /** Most bytes (MiB) the writable layer may hold; 0 or absent: no limit of its own. */
  diskSizeMB?: number;
  hostname: string;
  /** Host directory mounted read-only at /.aenv (node, its libraries, envd). */
  runtimeDir: string;
  /** Host file bound read-only at /etc/resolv.conf. */
  resolvConf: string;
  /**
   * Started ahead of need (the warm pool): its processes run at the lowest CPU priority until
   * prioritize() is called, so that they yield to the sandboxes clients are using.
   */
  lowPriority?: boolean;
}

export interface RuntimeInfo {
  driver: string;
  version: string;
  platform: string;
  /** Checkpoints restore only on a runtime with the same key (driver build and platform). */
  checkpointKey: string;
}

export interface SandboxStats {
  cpuUsedPct: number;
  memUsedBytes: number;
  memCacheBytes: number;
}

export interface RuntimeDriver {
  readonly name: string;
  /** Checks the runtime works on this host; throws a clear error otherwise. */
  probe(): Promise<RuntimeInfo>;
  /** Boots the sandbox with envd as its init; resolves once the sandbox process runs. */
  start(launch: SandboxLaunch): Promise<void>;
  /**
   * Captures memory, processes and the writable layer into imageDir (which must exist and be
   * empty). With leaveRunning the sandbox goes on; otherwise it is stopped afterwards.
   */
  checkpoint(id: string, imageDir: string, opts: { leaveRunning: boolean }): Promise<void>;
  /** Starts a sandbox from an image; launch may differ from the source's in ID, dir and netns. */
  restore(launch: SandboxLaunch, imageDir: string): Promise<void>;
  /** Whether imageDir holds a whole checkpoint (a crash can leave part of one). */
  isCompleteCheckpoint(imageDir: string | undefined): boolean;
  /** Bytes a checkpoint takes on disk. */
  checkpointBytes(imageDir: string): number;
  /**
   * Connections into the sandbox must be closed before a checkpoint (gVisor drops external
   * TCP endpoints when it checkpoints, and an application socket restored that way spins).
   */
  readonly quiesceBeforeCheckpoint: boolean;
  /** Stops the sandbox at once (no more CPU or network); destroy() must still follow. */
  stop(id: string): Promise<void>;
  /** Stops and removes the sandbox and its runtime state; idempotent. Can take a while. */
  destroy(id: string): Promise<void>;
  isRunning(id: string): Promise<boolean>;
  /**
   * The file that holds what the sandbox wrote to its console in one run folder (its init's
   * and envd's stdout and stderr), written by the sandbox: read it bounded
   * (orchestrator/console-reader.ts). Optional: a runtime without a console has none.
   */
  consoleFile?(runDir: string): string;
  stats(id: string): Promise<SandboxStats | undefined>;
  /** A sandbox started with lowPriority runs at normal priority from now on. */
  prioritize(id: string): Promise<void>;
  /** Optional abilities: each absent where the runtime has no way to do it. */
  readonly freezer?: Freezer;
  readonly suspender?: Suspender;
  readonly cpuMeter?: CpuMeter;
  /** IDs of every sandbox this driver's state knows about (to clean up after a restart); throws when it cannot tell. */
  list(opts?: { runningOnly?: boolean }): Promise<string[]>;
}

/**
 * Hibernation's and the warm pool's: stop every thread of the sandbox where it stands, memory
 * kept in place, and let it go on. A frozen sandbox uses no CPU; its clocks keep running.
 */
export interface Freezer {
  freeze(id: string): Promise<void>;
  thaw(id: string): Promise<void>;
}

/**
 * A pause answered early: every task of the sandbox stopped in place, memory kept, in a state
 * checkpoint() can save (and leaves stopped with leaveRunning); unsuspend() lets them go on.
 */
export interface Suspender {
  suspend(id: string): Promise<void>;
  unsuspend(id: string): Promise<void>;
  /** Whether the sandbox is suspended (after a restart: a pause the server died in). */
  isSuspended(id: string): boolean;
}

/** CPU time a sandbox has used so far, cheaply (no process started); undefined if unknown. */
export interface CpuMeter {
  cpuTimeNs(id: string): number | undefined;
}

export class RuntimeUnavailableError extends Error {}
