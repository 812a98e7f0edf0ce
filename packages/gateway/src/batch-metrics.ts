import type { IncomingMessage } from "node:http";
import type { NodeInfo } from "@aenv/edge/cluster-keys";
import { InvalidRequestError } from "@aenv/edge/errors";
import { zodMessage } from "@aenv/edge/http-errors";
import type { SandboxesWithMetrics } from "@aenv/protocol";
import { BatchMetricsQuery } from "@aenv/protocol/rest";
import type { Logger } from "pino";
import type { ClusterView } from "./cluster-view.js";
import { call } from "./forward.js";
import { nodeHeaders, parseJson } from "./http-util.js";

/** The path of E2B's batch metrics: not a sandbox's own path, though it looks like one. */
export const BATCH_METRICS_PATH = "/sandboxes/metrics";

export interface MergedMetrics {
  body: SandboxesWithMetrics;
  /** Why the map may be short: nodes that did not answer, sandboxes whose node is unreachable. */
  partial?: string;
}

/**
 * GET /sandboxes/metrics through the gateway: the IDs are checked as a node checks them, then
 * each owning node is asked once for its own sandboxes among them, and the maps are merged.
 * IDs no node owns are left out, as a node leaves out those it does not hold.
 */
export async function batchMetrics(view: ClusterView, req: IncomingMessage, log: Logger): Promise<MergedMetrics> {
  const raw = new URL(req.url ?? "/", "http://x").searchParams.getAll("sandbox_ids");
  const q = BatchMetricsQuery.safeParse({ sandbox_ids: raw.length > 1 ? raw : raw[0] });
  if (!q.success) throw new InvalidRequestError(zodMessage(q.error));
  const { live, dead } = await view.owners(q.data.sandbox_ids);
  const byNode = new Map<string, { node: NodeInfo; ids: string[] }>();
  for (const [id, node] of live) {
    const entry = byNode.get(node.nodeID) ?? { node, ids: [] };
    entry.ids.push(id);
    byNode.set(node.nodeID, entry);
  }
  const sandboxes: SandboxesWithMetrics["sandboxes"] = {};
  const silent: string[] = [];
  await Promise.all(
    [...byNode.values()].map(async ({ node, ids }) => {
      const path = `${BATCH_METRICS_PATH}?sandbox_ids=${ids.map(encodeURIComponent).join(",")}`;
      try {
        const ans = await call(node.url, "GET", path, nodeHeaders(req), undefined, 15_000);
        const part = ans.status === 200 ? parseJson<Partial<SandboxesWithMetrics>>(ans.body)?.sandboxes : undefined;
        if (!part) throw new Error(`status ${ans.status}: ${ans.body.toString().slice(0, 200)}`);
        // Only what was asked of this node: a node cannot answer for another's sandboxes.
        for (const id of ids) if (part[id]) sandboxes[id] = part[id];
      } catch (err) {
        log.warn({ err: (err as Error).message, node: node.nodeID }, "node did not answer batch metrics");
        silent.push(node.nodeID);
      }
    }),
  );
  const why = [
    ...(silent.length ? [`nodes not answering: ${silent.join(",")}`] : []),
    ...(dead.length ? [`sandboxes on unreachable nodes: ${dead.join(",")}`] : []),
  ];
  return { body: { sandboxes }, ...(why.length ? { partial: why.join("; ") } : {}) };
}
