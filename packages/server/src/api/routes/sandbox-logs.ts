import type { SandboxLogsV1, SandboxLogsV2 } from "@aenv/protocol";
import { LogsQueryV1, LogsQueryV2, SandboxIdParams } from "@aenv/protocol/rest";
import type { FastifyInstance } from "fastify";
import type { Orchestrator } from "../../orchestrator/orchestrator.js";

/** E2B's sandbox logs: v1 (deprecated there, still in the SDKs' types) and v2. */
export async function sandboxLogRoutes(app: FastifyInstance, o: { orch: Orchestrator }): Promise<void> {
  app.get("/sandboxes/:sandboxID/logs", async (req): Promise<SandboxLogsV1> => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const q = LogsQueryV1.parse(req.query);
    const entries = await o.orch.logs(sandboxID, {
      ...(q.start !== undefined ? { cursor: q.start } : {}),
      limit: q.limit,
      direction: "forward",
    });
    return { logs: entries.map((e) => ({ timestamp: e.timestamp, line: e.message })), logEntries: entries };
  });

  app.get("/v2/sandboxes/:sandboxID/logs", async (req): Promise<SandboxLogsV2> => {
    const { sandboxID } = SandboxIdParams.parse(req.params);
    const q = LogsQueryV2.parse(req.query);
    return { logs: await o.orch.logs(sandboxID, q) };
  });
}
