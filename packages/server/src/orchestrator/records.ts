import { InvalidRequestError } from "@aenv/edge/errors";
import { ownerOf, type Requester } from "@aenv/edge/tenants";
import type { ServerConfig } from "../config.js";
import type { NetworkSpec } from "../network/policy.js";
import type { NodePaths } from "../node-paths.js";
import { newClientId, newSandboxId, newToken } from "../state/ids.js";
import type { BootSettings, SandboxRecord } from "../state/store.js";
import type { Template } from "../state/template-catalog.js";
import type { Live } from "./registry.js";
import { runtimeIdFor } from "./runner.js";

/** What a client asks for when it creates a sandbox (from any template source). */
export interface CreateRequest {
  templateID: string;
  /**
   * The API key creating it (absent: the operator, as inside the server): it owns the sandbox,
   * starts only templates and snapshots it may see, and mounts only its own volumes.
   */
  requester?: Requester;
  timeoutS?: number;
  metadata?: Record<string, string>;
  envVars?: Record<string, string>;
  allowInternetAccess?: boolean;
  /** Validated network settings (network/policy.ts). */
  network?: NetworkSpec;
  autoPause?: boolean;
  autoResume?: boolean;
  /** false: TTL expiry pauses filesystem-only (see SandboxRecord.autoPauseMemory). */
  autoPauseMemory?: boolean;
  /** Boot the template's tree instead of restoring its warm image (POST /sandboxes-cold). */
  cold?: boolean;
  cpuCount?: number;
  memoryMB?: number;
  diskSizeMB?: number;
  /** Volumes by name at mount points (resolved to IDs when the sandbox is registered). */
  volumeMounts?: Array<{ name: string; path: string }>;
}

export interface Sizing {
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
}

/** A requested lifetime in seconds, defaulted and capped by the server's limits. */
export function clampTimeoutS(cfg: ServerConfig, s: number | undefined): number {
  const t = s ?? cfg.defaultTimeoutS;
  if (!Number.isFinite(t) || t < 0) throw new InvalidRequestError("timeout must be a non-negative number of seconds");
  return Math.min(t, cfg.maxTimeoutS);
}

/** A new sandbox's record, state "creating", with fresh client ID, envd token and runtime ID. */
/**
 * Options that contradict each other. Traffic must never resume a filesystem-only pause (it
 * reboots the sandbox, losing its processes): E2B refuses autoResume with it, so do we.
 */
export function checkCreateRequest(req: CreateRequest): void {
  if (req.autoPauseMemory === false && req.autoResume) {
    throw new InvalidRequestError(
      "autoResume cannot be combined with a filesystem-only auto-pause (keepMemory: false): resume such a sandbox with connect",
    );
  }
}

export function newSandboxRecord(
  cfg: ServerConfig,
  o: {
    id: string;
    dir: string;
    templateId: string;
    alias: string;
    rootfs: string;
    runtimeDir: string;
    req: CreateRequest;
    sizing: Sizing;
  },
): SandboxRecord {
  const now = Date.now();
  return {
    id: o.id,
    ...(o.req.requester ? ownerOf(o.req.requester) : {}),
    templateId: o.templateId,
    alias: o.alias,
    clientId: newClientId(),
    envdToken: newToken(),
    startedAt: now,
    endAt: now + clampTimeoutS(cfg, o.req.timeoutS) * 1000,
    state: "creating",
    cpuCount: o.sizing.cpuCount,
    memoryMB: o.sizing.memoryMB,
    diskSizeMB: cfg.maxDiskSizeMB > 0 ? Math.min(o.sizing.diskSizeMB, cfg.maxDiskSizeMB) : o.sizing.diskSizeMB,
    metadata: o.req.metadata ?? {},
    envVars: o.req.envVars ?? {},
    allowInternet: o.req.allowInternetAccess ?? true,
    ...(o.req.network ? { network: o.req.network } : {}),
    ...(o.req.network?.allowPublicTraffic === false ? { trafficToken: newToken() } : {}),
    // TTL expiry pauses unless the client asked for kill (autoPause: false).
    autoPause: o.req.autoPause ?? true,
    autoResume: o.req.autoResume ?? false,
    ...(o.req.autoPauseMemory === false ? { autoPauseMemory: false } : {}),
    slotIndex: null,
    dir: o.dir,
    runtimeId: runtimeIdFor(o.id),
    rootfs: o.rootfs,
    runtimeDir: o.runtimeDir,
  };
}

/**
 * A sandbox of a template at its own sizing, known to nobody but its caller (never stored or
 * listed): what a warm image is captured from and what the warm pool holds.
 */
export function templateSandbox(cfg: ServerConfig, paths: NodePaths, runtimeDir: string, tpl: Template): Live {
  const id = newSandboxId();
  const rec = newSandboxRecord(cfg, {
    id,
    dir: paths.sandbox(id),
    templateId: tpl.id,
    alias: tpl.name,
    rootfs: tpl.rootfs,
    runtimeDir,
    req: { templateID: tpl.id },
    sizing: tpl,
  });
  return { rec, op: Promise.resolve(), ephemeral: true };
}

/** What a fresh boot of a sandbox from this template needs (kept in its record). */
export function bootSettings(tpl: Template): BootSettings {
  return {
    env: tpl.env,
    user: tpl.user,
    workdir: tpl.workdir,
    ...(tpl.startCmd ? { startCmd: tpl.startCmd } : {}),
    ...(tpl.readyCmd ? { readyCmd: tpl.readyCmd } : {}),
  };
}
