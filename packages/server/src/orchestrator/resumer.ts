import type { SandboxRecord } from "../state/store.js";
import { timed } from "../telemetry/prometheus.js";
import type { ClusterFence } from "./cluster-fence.js";
import type { NodeContext } from "./node-context.js";
import type { PauseCommits } from "./pause-commits.js";
import { autoResumable, pausedError, type ResumeOptions, refuseResumer } from "./pause-kinds.js";
import type { PauseResume } from "./pause-resume.js";

/**
 * A client's resume, wherever the sandbox is paused: in a cluster one paused on another node
 * is taken over from the shared repository (or its peer) first; the caller's right to resume
 * it, auto-resume rules and this node's lease are checked; a running sandbox has its TTL
 * extended instead. The API, the proxy's auto-resume and a snapshot of a saved sandbox all
 * come through here.
 */
export class Resumer {
  constructor(
    private readonly ctx: NodeContext,
    private readonly uses: { pauses: PauseResume; commits: PauseCommits; fence: ClusterFence },
  ) {}

  /** Resumes a paused sandbox, or extends a running one's TTL; says which. */
  resume(
    id: string,
    timeoutS: number | undefined,
    opts: ResumeOptions = {},
  ): Promise<{ rec: SandboxRecord; resumed: boolean }> {
    return timed(
      "resume",
      () => this.resumeOrExtend(id, timeoutS, opts),
      (r) => r.resumed,
    );
  }

  private async resumeOrExtend(id: string, timeoutS: number | undefined, opts: ResumeOptions) {
    const { registry } = this.ctx;
    if (this.ctx.cfg.cluster && !registry.has(id)) {
      registry.assertOpen();
      this.uses.fence.assertLease(id);
      await this.uses.commits.adopt(id, this.ctx.runtimeDir, opts);
    }
    const l = registry.get(id);
    if (l) refuseResumer(l.rec, opts);
    if (opts.auto && l?.rec.state === "paused" && !autoResumable(l.rec)) throw pausedError(l.rec);
    if (l?.rec.state === "paused") this.uses.fence.assertLease(id);
    return this.uses.pauses.resume(id, timeoutS, { memory: opts.memory });
  }
}
