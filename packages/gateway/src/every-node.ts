import type { IncomingMessage } from "node:http";
import type { NodeInfo } from "@aenv/edge/cluster-keys";
import { call } from "./forward.js";
import { nodeHeaders, parseJson } from "./http-util.js";

/**
 * One GET to each of these nodes, each answering a JSON array (its own share of a list or a
 * series): the arrays, and the nodes that did not answer one (down, an error status, not an
 * array), for the caller to merge and to name as missing.
 */
export async function askEveryNode<T>(
  nodes: readonly NodeInfo[],
  path: string,
  req: IncomingMessage,
): Promise<{ parts: T[][]; missing: string[] }> {
  const missing: string[] = [];
  const parts = await Promise.all(
    nodes.map(async (n) => {
      try {
        const ans = await call(n.url, "GET", path, nodeHeaders(req), undefined, 15_000);
        const part = ans.status === 200 ? parseJson<T[]>(ans.body) : undefined;
        if (Array.isArray(part)) return part;
      } catch {
        // counted as missing below
      }
      missing.push(n.nodeID);
      return [] as T[];
    }),
  );
  return { parts, missing };
}
