import { FencedError } from "@aenv/edge/errors";
import type { NodeContext } from "./node-context.js";
import type { PauseCommits } from "./pause-commits.js";

/**
 * A node's side of split-brain safety in a cluster. While its lease is not current (its last
 * heartbeat is old enough that a gateway may have counted it dead), another node may be
 * resuming its paused sandboxes from the repository, so this node resumes and takes over
 * nothing (503); running sandboxes keep running. After a partition heals, its copies of
 * sandboxes another node took over are dropped.
 */
export class ClusterFence {
  /** Set by the cluster's node agent (cluster/node-agent.ts). */
  leaseCurrent: () => boolean = () => true;

  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: { commits: PauseCommits },
  ) {}

  assertLease(id: string): void {
    if (this.ctx.cfg.cluster && !this.leaseCurrent()) {
      throw new FencedError(
        `this node's cluster lease has lapsed (its heartbeat has not reached the cluster's state in time): sandbox '${id}' is not resumed here until it is renewed; retry through a gateway`,
      );
    }
  }

  /**
   * Sandboxes this node holds whose route names another live node (sandbox ID → that node).
   * The repository's claim decides, not the route (a node that just resumed a sandbox sees the
   * old owner's route until the gateway writes the new one): one whose last pause another node
   * claimed was resumed there, so this copy is stale. A paused one is forgotten here, a running
   * one stopped. Nothing in the shared repository is deleted: it is the other node's now. Any
   * other is kept (its route is not taken back). Returns the IDs dropped.
   */
  async supersede(moved: Map<string, string>): Promise<string[]> {
    const { registry, runner, states, log } = this.ctx;
    const { commits } = this.uses;
    const dropped: string[] = [];
    for (const [id, owner] of moved) {
      const l = registry.get(id);
      if (!l || (l.rec.state !== "paused" && l.rec.state !== "running")) continue;
      await registry.enqueue(l, async () => {
        if (registry.get(id) !== l) return;
        const holder = await commits.claimedElsewhere(l.rec).catch((err: Error) => {
          log.warn({ err: err.message, sandboxID: id }, "claim of a sandbox routed elsewhere not read");
          return undefined;
        });
        if (!holder) return;
        if (l.rec.state === "paused") {
          commits.dropMoved(l.rec);
          log.warn(
            { sandboxID: id, owner, holder },
            "paused sandbox superseded: another node resumed it while this node was cut off; local copy dropped, the repository left as it is",
          );
        } else if (l.rec.state === "running") {
          states.killing(l.rec);
          await runner.remove(l, true);
          log.warn(
            { sandboxID: id, owner, holder },
            "sandbox superseded: another node resumed its last pause; stopped and dropped here, the repository left as it is",
          );
        } else return;
        dropped.push(id);
      });
    }
    return dropped;
  }
}
