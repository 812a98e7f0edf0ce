import type { NodeInfo } from "@aenv/edge/cluster-keys";
import type { ServerConfig } from "../config.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import { type TemplateStore, usable } from "../state/template-catalog.js";
import { runningByOwner } from "./tenants.js";

/** What this node tells the cluster about itself (and GET /nodes answers on the node). */
export function describeNode(
  cfg: ServerConfig,
  orch: Orchestrator,
  templates: TemplateStore,
  o: { nodeId: string; url: string; version: string; checkpointKey: string; draining: boolean },
): Omit<NodeInfo, "updatedAt"> {
  let sandboxCount = 0;
  let pausedCount = 0;
  let cpu = 0;
  let mem = 0;
  for (const l of orch.registry.all()) {
    if (l.ephemeral) continue;
    if (l.rec.state === "paused") pausedCount++;
    else if (l.rec.state === "running" || l.rec.state === "creating") {
      sandboxCount++;
      cpu += l.rec.cpuCount;
      mem += l.rec.memoryMB;
    }
  }
  return {
    nodeID: o.nodeId,
    url: o.url,
    status: o.draining ? "draining" : "ready",
    sandboxCount,
    capacity: cfg.maxSandboxes,
    pausedCount,
    allocatedCPU: cpu,
    allocatedMemoryMiB: mem,
    checkpointKey: o.checkpointKey,
    version: o.version,
    // An image started on demand is named by its reference in creates: the gateway places a
    // create naming it on a node that holds it.
    templates: templates
      .list()
      .filter(usable)
      .flatMap((t) => (t.onDemand && t.fromImage ? [t.id, t.fromImage] : [t.id])),
    owners: Object.fromEntries(runningByOwner(orch.registry.all().flatMap((l) => (l.ephemeral ? [] : [l.rec])))),
  };
}
