import { readFileSync } from "node:fs";
import { isIPv4 } from "node:net";
import { join } from "node:path";
import type { Logger } from "pino";
import type { ServerConfig } from "../config.js";
import { EgressCa } from "../network/egress-ca.js";
import { EgressProxy } from "../network/egress-proxy.js";
import { HeaderRewriter } from "../network/egress-rewriter.js";
import { EgressTunnel } from "../network/egress-tunnel.js";
import { HostAddresses } from "../network/host-addresses.js";
import { HostClaim } from "../network/host-claim.js";
import { LoopbackSlots } from "../network/loopback-slots.js";
import { inCidrs } from "../network/policy.js";
import { dialThroughProxy } from "../network/proxy-dial.js";
import { type SlotAllocator, SlotPool } from "../network/slots.js";
import type { Orchestrator } from "../orchestrator/orchestrator.js";
import type { SecretStore } from "../secrets/store.js";
import type { Component } from "./component.js";
import type { writeResolvConf } from "./host-dirs.js";

export interface Slots extends Component {
  slots: SlotAllocator;
}

/**
 * The pool of sandbox network slots, its prefix and range claimed on the host; set up by
 * startEgress, once the proxy's ports are known.
 * Simulated sandboxes get loopback addresses instead (no namespaces: see LoopbackSlots).
 */
export function openSlots(cfg: ServerConfig, log: Logger): Slots {
  if (cfg.runtimeDriver === "sim") {
    const slots = new LoopbackSlots(cfg.slotCidr, cfg.netPrefix);
    return { slots, stop: () => slots.close() };
  }
  // First, before anything of the host is touched: a pool removes every namespace of its
  // prefix at start, and another running server's would be among them (host-claim.ts).
  const claim = new HostClaim();
  claim.take([
    { name: `net-${cfg.netPrefix}`, what: `network prefix '${cfg.netPrefix}'` },
    { name: `cidr-${cfg.slotCidr.replace("/", "_")}`, what: `slot range ${cfg.slotCidr}` },
  ]);
  const slots = new SlotPool(cfg.slotCidr, log.child({ component: "network" }), cfg.warmSlots, cfg.netPrefix);
  return {
    slots,
    stop: async () => {
      await slots.close();
      claim.release();
    },
  };
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
  slots: SlotAllocator;
  resolv: ReturnType<typeof writeResolvConf>;
}

/**
 * The host egress proxy for domain rules, listening; then the slots' router rules, which
 * send sandboxes to its ports, and the rules again for sandboxes taken over from the
 * previous run (the proxy's ports moved).
 */
export async function startEgress(d: EgressDeps, keepSlots: number[]): Promise<Component> {
  const { cfg, log } = d;
  const upstreamCa = cfg.egress.upstreamCaFile ? readFileSync(cfg.egress.upstreamCaFile, "utf8") : undefined;
  // A user's proxy is dialled from the host: not at the host itself or a denied range, unless
  // the operator allowed that network for proxies.
  const host = new HostAddresses([cfg.slotCidr]);
  const userProxy = {
    permitted: (ip: string) =>
      inCidrs(ip, cfg.egress.proxyAllowed) || (!host.has(ip) && !inCidrs(ip, cfg.egress.deniedRanges)),
    ...(upstreamCa ? { ca: upstreamCa } : {}),
  };
  const tunnel = new EgressTunnel({
    log: log.child({ component: "egress" }),
    sandboxFor: (ip) => d.orch.egressSandbox(ip),
    denied: cfg.egress.deniedRanges,
    slotCidr: cfg.slotCidr,
    proxyPermitted: userProxy.permitted,
    ...(upstreamCa ? { proxyCa: upstreamCa } : {}),
  });
  const egress = new EgressProxy({
    log: log.child({ component: "egress" }),
    sandboxFor: (ip) => d.orch.egressSandbox(ip),
    denied: cfg.egress.deniedRanges,
    slotCidr: cfg.slotCidr,
    hosts: cfg.egress.hosts,
    userProxy,
    rewriter: new HeaderRewriter({
      ca: d.egressCa,
      secret: (name, host, owner) => d.secrets.use(name, host, owner),
      log: log.child({ component: "egress" }),
      ...(upstreamCa ? { extraUpstreamCa: upstreamCa } : {}),
      via: (sandbox, name, port) => {
        const proxy = sandbox.spec?.egressProxy;
        if (!proxy) return undefined;
        return dialThroughProxy(proxy, { host: name, port }, userProxy).then(({ socket, head }) => {
          // Whatever the proxy sent past its answer is the upstream's: read first.
          if (head.length > 0) socket.unshift(head);
          return socket;
        });
      },
    }),
  });
  const proxyPorts = await egress.listen();
  const tunnelPort = await tunnel.listen();
  await d.slots.init(keepSlots, {
    denied: cfg.egress.deniedRanges,
    resolvers: d.resolv.servers.filter((s) => isIPv4(s)),
    proxyPorts,
    tunnelPort,
  });
  await d.orch.reapplyNetwork();
  return { stop: async () => void (await Promise.all([egress.close(), tunnel.close()])) };
}
