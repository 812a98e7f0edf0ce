import type { Logger } from "pino";
import { Orchestrator, type OrchestratorDeps, type RecoveryReport } from "../orchestrator/orchestrator.js";
import type { Component } from "./component.js";

export interface Sandboxes extends Component {
  orch: Orchestrator;
  recovery: RecoveryReport;
  /** Network slots still held by sandboxes taken over from the previous run. */
  keepSlots: number[];
}

/** The sandboxes of this node: the orchestrator, with what the previous run left recovered. */
export async function startOrchestrator(deps: OrchestratorDeps, log: Logger): Promise<Sandboxes> {
  const orch = new Orchestrator(deps);
  const { report: recovery, keepSlots } = await orch.recover();
  if (recovery.cleanedUp.length) {
    log.warn({ sandboxes: recovery.cleanedUp }, "sandboxes lost in the previous server run were cleaned up");
  }
  return { orch, recovery, keepSlots, stop: () => orch.close() };
}
