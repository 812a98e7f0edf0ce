import { ConflictError, NotFoundError } from "@aenv/edge/errors";
import type { EgressSandbox } from "../network/egress-proxy.js";
import { compileEgress, type NetworkSpec } from "../network/policy.js";
import type { NodeContext } from "./node-context.js";

/** Sandboxes' network rules on their slots: looked up for the egress proxy, applied again, replaced. */
export class SandboxNetwork {
  constructor(private readonly ctx: NodeContext) {}

  /** The sandbox whose slot has this address, for the egress proxy. */
  egressSandbox(slotIp: string): EgressSandbox | undefined {
    for (const l of this.ctx.registry.all()) {
      if (l.slot?.slotIp === slotIp) {
        return {
          id: l.rec.id,
          ...(l.rec.owner ? { owner: l.rec.owner } : {}),
          hostIp: l.slot.hostIp,
          policy: compileEgress(l.rec.network, l.rec.allowInternet),
          spec: l.rec.network,
        };
      }
    }
    return undefined;
  }

  /** Applies every running sandbox's rules to its slot again (after a restart took them over). */
  async reapply(): Promise<void> {
    for (const l of this.ctx.registry.all()) {
      if (!l.slot) continue;
      await this.ctx.slots
        .applyPolicy(l.slot, compileEgress(l.rec.network, l.rec.allowInternet))
        .catch((err) => this.ctx.log.error({ err, sandboxID: l.rec.id }, "network rules not re-applied"));
    }
  }

  /**
   * PUT /sandboxes/{id}/network: replaces the outbound rules (omitted fields are cleared;
   * allowPublicTraffic, maskRequestHost and httpsPorts are creation-time settings and stay). Applied to
   * the running slot at once; a paused sandbox gets them when it resumes.
   */
  update(id: string, update: NetworkSpec, allowInternet: boolean | undefined): Promise<void> {
    const live = this.ctx.registry.get(id);
    if (!live) throw new NotFoundError(`sandbox '${id}' not found`);
    return this.ctx.registry.enqueue(live, async () => {
      const rec = live.rec;
      // A paused sandbox's record is already committed for other nodes: change it running only.
      if (rec.state !== "running") throw new ConflictError(`sandbox '${id}' is ${rec.state}; resume it first`);
      const next: NetworkSpec = { ...update };
      if (rec.network?.allowPublicTraffic !== undefined) next.allowPublicTraffic = rec.network.allowPublicTraffic;
      if (rec.network?.maskRequestHost !== undefined) next.maskRequestHost = rec.network.maskRequestHost;
      if (rec.network?.httpsPorts !== undefined) next.httpsPorts = rec.network.httpsPorts;
      rec.network = next;
      rec.allowInternet = allowInternet ?? true;
      this.ctx.states.save(rec);
      if (live.slot) {
        await this.ctx.runner.ensureEgressTrust(live);
        await this.ctx.slots.applyPolicy(live.slot, compileEgress(rec.network, rec.allowInternet));
      }
    });
  }
}
