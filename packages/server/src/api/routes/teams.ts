import { DEFAULT_TEAM_ID, type Team } from "@aenv/protocol";
import { MaxTeamMetricQuery, TeamMetricsQuery } from "@aenv/protocol/rest";
import type { FastifyInstance } from "fastify";
import { NotFoundError } from "../../errors.js";
import type { Orchestrator } from "../../orchestrator/orchestrator.js";
import { maxTeamMetric, TeamMetrics } from "../../telemetry/team-metrics.js";

export interface TeamRoutesOptions {
  orch: Orchestrator;
}

/** E2B's one team: the caller's key is its key (one API key per cluster). */
export function teamsOf(apiKey: string): Team[] {
  return [{ teamID: DEFAULT_TEAM_ID, name: DEFAULT_TEAM_ID, apiKey, isDefault: true }];
}

export function mustBeTeam(teamID: string): void {
  if (teamID !== DEFAULT_TEAM_ID) throw new NotFoundError(`team '${teamID}' not found`);
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
