import { ConflictError, NotFoundError } from "@aenv/edge/errors";
import type { Logger } from "pino";
import type { EgressSandbox } from "../network/egress-proxy.js";
import { compileEgress, type NetworkSpec } from "../network/policy.js";
import type { SlotAllocator } from "../network/slots.js";
import type { SandboxRegistry } from "./registry.js";
import type { SandboxRunner } from "./runner.js";
import type { SandboxStates } from "./sandbox-states.js";

/** Sandboxes' network rules on their slots: looked up for the egress proxy, applied again, replaced. */
export class SandboxNetwork {
  constructor(
    private readonly d: {
      registry: SandboxRegistry;
      runner: SandboxRunner;
      slots: SlotAllocator;
      /** Where state changes and records are persisted (sandbox-states.ts). */
      states: SandboxStates;
      log: Logger;
    },
  ) {}

  /** The sandbox whose slot has this address, for the egress proxy. */
  egressSandbox(slotIp: string): EgressSandbox | undefined {
    for (const l of this.d.registry.all()) {
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
    for (const l of this.d.registry.all()) {
      if (!l.slot) continue;
      await this.d.slots
        .applyPolicy(l.slot, compileEgress(l.rec.network, l.rec.allowInternet))
        .catch((err) => this.d.log.error({ err, sandboxID: l.rec.id }, "network rules not re-applied"));
    }
  }

  /**
   * PUT /sandboxes/{id}/network: replaces the outbound rules (omitted fields are cleared;
   * allowPublicTraffic, maskRequestHost and httpsPorts are creation-time settings and stay). Applied to
   * the running slot at once; a paused sandbox gets them when it resumes.
   */
  update(id: string, update: NetworkSpec, allowInternet: boolean | undefined): Promise<void> {
    const live = this.d.registry.get(id);
    if (!live) throw new NotFoundError(`sandbox '${id}' not found`);
    return this.d.registry.enqueue(live, async () => {
      const rec = live.rec;
      // A paused sandbox's record is already committed for other nodes: change it running only.
      if (rec.state !== "running") throw new ConflictError(`sandbox '${id}' is ${rec.state}; resume it first`);
      const next: NetworkSpec = { ...update };
      if (rec.network?.allowPublicTraffic !== undefined) next.allowPublicTraffic = rec.network.allowPublicTraffic;
      if (rec.network?.maskRequestHost !== undefined) next.maskRequestHost = rec.network.maskRequestHost;
      if (rec.network?.httpsPorts !== undefined) next.httpsPorts = rec.network.httpsPorts;
      rec.network = next;
      rec.allowInternet = allowInternet ?? true;
      this.d.states.save(rec);
      if (live.slot) {
        await this.d.runner.ensureEgressTrust(live);
        await this.d.slots.applyPolicy(live.slot, compileEgress(rec.network, rec.allowInternet));
      }
    });
  }
}
