import {
  ENVD_VERSION,
  type ListedSandbox,
  type SandboxCreated,
  type SandboxDetail,
  type SnapshotInfo,
} from "@aenv/protocol";
import { publicEgressProxy } from "../network/egress-proxy-config.js";
import type { NetworkSpec } from "../network/policy.js";
import { trafficTokenOf } from "../orchestrator/envd-credentials.js";
import type { SandboxRecord, SnapshotRecord } from "../state/store.js";

export interface SerializeContext {
  domain: string;
}

/** `Sandbox` as returned by create/connect. */
export function sandboxCreated(r: SandboxRecord, ctx: SerializeContext): SandboxCreated {
  return {
    sandboxID: r.id,
    templateID: r.templateId,
    clientID: r.clientId,
    alias: r.alias,
    envdVersion: ENVD_VERSION,
    envdAccessToken: r.envdToken,
    trafficAccessToken: trafficTokenOf(r),
    domain: ctx.domain,
  };
}

function lifecycle(r: SandboxRecord): SandboxDetail["lifecycle"] {
  return { onTimeout: r.autoPause ? "pause" : "kill", autoResume: r.autoResume };
}

/** The state a client sees: a sandbox hibernation saved to disk is still running to it. */
export function apiState(r: Pick<SandboxRecord, "state" | "pause">): "running" | "paused" {
  return r.state === "paused" && !r.pause?.idleSaved ? "paused" : "running";
}

/** `ListedSandbox` (list endpoints). */
/** What the node knows of a sandbox beyond its record: where it is and whether it is hibernated. */
export interface SandboxPlace {
  nodeID: string;
  hibernation?: "frozen" | "saved";
}

export function sandboxListed(r: SandboxRecord, place?: SandboxPlace): ListedSandbox {
  return {
    sandboxID: r.id,
    templateID: r.templateId,
    alias: r.alias,
    clientID: r.clientId,
    cpuCount: r.cpuCount,
    memoryMB: r.memoryMB,
    diskSizeMB: r.diskSizeMB,
    startedAt: new Date(r.startedAt).toISOString(),
    endAt: new Date(r.endAt).toISOString(),
    state: apiState(r),
    envdVersion: ENVD_VERSION,
    metadata: r.metadata,
    volumeMounts: (r.volumeMounts ?? []).map(({ name, path }) => ({ name, path })),
    ...(place ? { nodeID: place.nodeID } : {}),
    ...(place?.hibernation ? { hibernation: place.hibernation } : {}),
  };
}

/** A sandbox's network settings as answers show them: a proxy's password never leaves the server. */
function publicNetwork(n: NetworkSpec) {
  const { egressProxy, ...rest } = n;
  return egressProxy ? { ...rest, egressProxy: publicEgressProxy(egressProxy) } : rest;
}

/** `SandboxDetail` (GET /sandboxes/{id}). */
export function sandboxDetail(r: SandboxRecord, ctx: SerializeContext, place?: SandboxPlace): SandboxDetail {
  return {
    ...sandboxListed(r, place),
    envdAccessToken: r.envdToken,
    domain: ctx.domain,
    allowInternetAccess: r.allowInternet,
    lifecycle: lifecycle(r),
    ...(r.network ? { network: publicNetwork(r.network) } : {}),
  };
}

/** `SnapshotInfo`: E2B's {snapshotID, names} plus sizing and dates. */
export function snapshotInfo(s: SnapshotRecord): SnapshotInfo {
  return {
    snapshotID: s.id,
    names: s.names,
    sandboxID: s.sandboxId,
    templateID: s.templateId,
    cpuCount: s.cpuCount,
    memoryMB: s.memoryMB,
    diskSizeMB: s.diskSizeMB,
    sizeBytes: s.sizeBytes,
    committed: s.committed === true,
    ...(s.uploadedBytes !== undefined ? { uploadedBytes: s.uploadedBytes } : {}),
    createdAt: new Date(s.createdAt).toISOString(),
    updatedAt: new Date(s.createdAt).toISOString(),
  };
}
