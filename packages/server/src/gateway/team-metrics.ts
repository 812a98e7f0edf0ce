import type { IncomingMessage } from "node:http";
import type { MaxTeamMetric, TeamMetric } from "@aenv/protocol";
import { MaxTeamMetricQuery, TeamMetricsQuery } from "@aenv/protocol/rest";
import type { Logger } from "pino";
import { mustBeTeam } from "../api/routes/teams.js";
import { InvalidRequestError } from "../errors.js";
import { zodMessage } from "../http-errors.js";
import { maxTeamMetric, sumTeamMetrics } from "../telemetry/team-metrics.js";
import type { ClusterView } from "./cluster-view.js";
import { call } from "./forward.js";
import { nodeHeaders, parseJson } from "./http-util.js";

export interface MergedTeamMetrics<T> {
  body: T;
  /** Nodes that did not answer: the sums may be short. */
  partial?: string;
}

/** The team's series over the cluster: every node's samples, added up by time. */
async function clusterSeries(
  view: ClusterView,
  req: IncomingMessage,
  log: Logger,
  start: number | undefined,
  end: number | undefined,
): Promise<MergedTeamMetrics<TeamMetric[]>> {
  const qs = new URLSearchParams();
  if (start !== undefined) qs.set("start", String(start));
  if (end !== undefined) qs.set("end", String(end));
  const nodes = (await view.nodes()).filter((n) => n.url);
  const silent: string[] = [];
  const parts = await Promise.all(
    nodes.map(async (n) => {
      try {
        const ans = await call(n.url, "GET", `/teams/default/metrics?${qs}`, nodeHeaders(req), undefined, 15_000);
        const part = ans.status === 200 ? parseJson<TeamMetric[]>(ans.body) : undefined;
        if (!Array.isArray(part)) throw new Error(`status ${ans.status}`);
        return part;
      } catch (err) {
        log.warn({ err: (err as Error).message, node: n.nodeID }, "node did not answer team metrics");
        silent.push(n.nodeID);
        return [];
      }
    }),
  );
  return {
    body: sumTeamMetrics(parts),
    ...(silent.length ? { partial: `nodes not answering: ${silent.join(",")}` } : {}),
  };
}

function query<T>(
  schema: { safeParse(x: unknown): { success: true; data: T } | { success: false; error: import("zod").ZodError } },
  req: IncomingMessage,
): T {
  const q = schema.safeParse(Object.fromEntries(new URL(req.url ?? "/", "http://x").searchParams));
  if (!q.success) throw new InvalidRequestError(zodMessage(q.error));
  return q.data;
}

/** GET /teams/{teamID}/metrics through the gateway. */
export async function teamMetrics(
  view: ClusterView,
  req: IncomingMessage,
  teamID: string,
  log: Logger,
): Promise<MergedTeamMetrics<TeamMetric[]>> {
  mustBeTeam(teamID);
  const q = query(TeamMetricsQuery, req);
  return clusterSeries(view, req, log, q.start, q.end);
}

/** GET /teams/{teamID}/metrics/max through the gateway: the largest of the cluster's sums. */
export async function maxTeamMetrics(
  view: ClusterView,
  req: IncomingMessage,
  teamID: string,
  log: Logger,
): Promise<MergedTeamMetrics<MaxTeamMetric>> {
  mustBeTeam(teamID);
  const q = query(MaxTeamMetricQuery, req);
  const end = q.end ?? Math.floor(Date.now() / 1000);
  const series = await clusterSeries(view, req, log, q.start, end);
  return { ...series, body: maxTeamMetric(series.body, q.metric, end) };
}
