import type { IncomingMessage } from "node:http";
import { InvalidRequestError } from "@aenv/edge/errors";
import { zodMessage } from "@aenv/edge/http-errors";
import { maxTeamMetric, sumTeamMetrics } from "@aenv/edge/team-metrics";
import { mustBeTeam } from "@aenv/edge/teams";
import type { MaxTeamMetric, TeamMetric } from "@aenv/protocol";
import { MaxTeamMetricQuery, TeamMetricsQuery } from "@aenv/protocol/rest";
import type { z } from "zod";
import type { ClusterView } from "./cluster-view.js";
import { askEveryNode } from "./every-node.js";

export interface MergedTeamMetrics<T> {
  body: T;
  /** Nodes that did not answer: the sums may be short. */
  missing: string[];
}

/** The team's series over the cluster: every node's samples, added up by time. */
async function clusterSeries(
  view: ClusterView,
  req: IncomingMessage,
  start: number | undefined,
  end: number | undefined,
): Promise<MergedTeamMetrics<TeamMetric[]>> {
  const qs = new URLSearchParams();
  if (start !== undefined) qs.set("start", String(start));
  if (end !== undefined) qs.set("end", String(end));
  const nodes = (await view.nodes()).filter((n) => n.url);
  const { parts, missing } = await askEveryNode<TeamMetric>(nodes, `/teams/default/metrics?${qs}`, req);
  return { body: sumTeamMetrics(parts), missing };
}

function query<T>(schema: z.ZodType<T>, req: IncomingMessage): T {
  const q = schema.safeParse(Object.fromEntries(new URL(req.url ?? "/", "http://x").searchParams));
  if (!q.success) throw new InvalidRequestError(zodMessage(q.error));
  return q.data;
}

/** GET /teams/{teamID}/metrics through the gateway. */
export async function teamMetrics(
  view: ClusterView,
  req: IncomingMessage,
  teamID: string,
): Promise<MergedTeamMetrics<TeamMetric[]>> {
  mustBeTeam(teamID);
  const q = query(TeamMetricsQuery, req);
  return clusterSeries(view, req, q.start, q.end);
}

/** GET /teams/{teamID}/metrics/max through the gateway: the largest of the cluster's sums. */
export async function maxTeamMetrics(
  view: ClusterView,
  req: IncomingMessage,
  teamID: string,
): Promise<MergedTeamMetrics<MaxTeamMetric>> {
  mustBeTeam(teamID);
  const q = query(MaxTeamMetricQuery, req);
  const end = q.end ?? Math.floor(Date.now() / 1000);
  const series = await clusterSeries(view, req, q.start, end);
  return { ...series, body: maxTeamMetric(series.body, q.metric, end) };
}
