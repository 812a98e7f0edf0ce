import { readFileSync } from "node:fs";
import { isIPv4 } from "node:net";
import { join } from "node:path";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import { EgressCa } from "../network/egress-ca.js";
import { EgressProxy } from "../network/egress-proxy.js";
import { HeaderRewriter } from "../network/egress-rewriter.js";
import { SlotPool } from "../network/slots.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import type { SecretStore } from "../secrets/store.js";
import type { Component } from "./component.js";
import type { writeResolvConf } from "./host-dirs.js";

export interface Slots extends Component {
  slots: SlotPool;
}

/** The pool of sandbox network slots; set up by startEgress, once the proxy's ports are known. */
export function openSlots(cfg: ServerConfig, log: Logger): Slots {
  const slots = new SlotPool(cfg.slotCidr, log.child({ component: "network" }), cfg.warmSlots, cfg.netPrefix);
  return { slots, stop: () => slots.close() };
}

/** The CA whose certificates the egress proxy presents where rules rewrite HTTPS. */
export function openEgressCa(cfg: ServerConfig): Promise<EgressCa> {
  return EgressCa.open(cfg.egress.caDir ?? join(cfg.dataDir, "egress-ca"));
}

export interface EgressDeps {
  cfg: ServerConfig;
  log: Logger;
  orch: Orchestrator;
  secrets: SecretStore;
  egressCa: EgressCa;
  slots: SlotPool;
  resolv: ReturnType<typeof writeResolvConf>;
}

/**
 * The host egress proxy for domain rules, listening; then the slots' router rules, which
 * send sandboxes to its ports, and the rules again for sandboxes taken over from the
 * previous run (the proxy's ports moved).
 */
export async function startEgress(d: EgressDeps, keepSlots: number[]): Promise<Component> {
  const { cfg, log } = d;
  const egress = new EgressProxy({
    log: log.child({ component: "egress" }),
    sandboxFor: (ip) => d.orch.egressSandbox(ip),
    denied: cfg.egress.deniedRanges,
    slotCidr: cfg.slotCidr,
    hosts: cfg.egress.hosts,
    rewriter: new HeaderRewriter({
      ca: d.egressCa,
      secret: (name, host) => d.secrets.use(name, host),
      log: log.child({ component: "egress" }),
      ...(cfg.egress.upstreamCaFile ? { extraUpstreamCa: readFileSync(cfg.egress.upstreamCaFile, "utf8") } : {}),
    }),
  });
  const proxyPorts = await egress.listen();
  await d.slots.init(keepSlots, {
    denied: cfg.egress.deniedRanges,
    resolvers: d.resolv.servers.filter((s) => isIPv4(s)),
    proxyPorts,
  });
  await d.orch.reapplyNetwork();
  return { stop: () => egress.close() };
}
