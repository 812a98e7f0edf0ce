import { maxTeamMetric, TeamMetrics } from "@aenv/edge/team-metrics";
import { mustBeTeam, teamsOf } from "@aenv/edge/teams";
import { MaxTeamMetricQuery, TeamMetricsQuery } from "@aenv/protocol/rest";
import type { FastifyInstance } from "fastify";
import type { Orchestrator } from "../../orchestrator/orchestrator.js";

export interface TeamRoutesOptions {
  orch: Orchestrator;
}

/** GET /teams and the team's metrics, this node's share (a gateway adds the nodes' up). */
export async function teamRoutes(app: FastifyInstance, o: TeamRoutesOptions): Promise<void> {
  const metrics = new TeamMetrics(() => o.orch.list());
  metrics.start();
  app.addHook("onClose", async () => metrics.stop());

  app.get("/teams", async (req) => teamsOf(String(req.headers["x-api-key"] ?? "")));

  app.get("/teams/:teamID/metrics", async (req) => {
    mustBeTeam((req.params as { teamID: string }).teamID);
    const q = TeamMetricsQuery.parse(req.query);
    return metrics.range(q.start, q.end);
  });

  app.get("/teams/:teamID/metrics/max", async (req) => {
    mustBeTeam((req.params as { teamID: string }).teamID);
    const q = MaxTeamMetricQuery.parse(req.query);
    const end = q.end ?? Math.floor(Date.now() / 1000);
    return maxTeamMetric(metrics.range(q.start, end), q.metric, end);
  });
}
