import { GUEST_IP } from "./addresses.js";
import type { EgressPolicy } from "./policy.js";

/** What every slot's router enforces whatever the sandbox's own rules say. */
export interface EgressGuard {
  /** Never reachable from a sandbox (link-local/metadata, private ranges, other servers' slots). */
  denied: string[];
  /** Nameservers sandboxes use: DNS (port 53) to them passes unless the sandbox may reach nothing. */
  resolvers: string[];
  /** Host ports of the egress proxy (plain HTTP, TLS) for domain rules; absent: no domain rules. */
  proxyPorts?: { http: number; tls: number };
  /** Host port of the egress tunnel (network.egressProxy); absent: no sandbox may name a proxy. */
  tunnelPort?: number;
}

const set = (xs: string[]) => `{ ${xs.join(", ")} }`;

/**
 * The whole nftables table of one slot's router namespace, replaced atomically when the
 * sandbox's policy changes (conntrack keeps established flows and their NAT).
 *
 * Order of the egress verdict: DNS to the node's resolvers, then always-denied ranges, then
 * allowOut (wins over deny), then denyOut, then accept. TCP 80/443 to a denied address is
 * redirected to the host's egress proxy when the sandbox has domain rules: the proxy lets it
 * through only if the TLS SNI or HTTP Host names an allowed domain.
 */
export function routerTable(cidr: string, hostIp: string, policy: EgressPolicy, guard: EgressGuard): string {
  const denyAll = policy.denyCidrs.includes("0.0.0.0/0");
  const reachesSomething = !denyAll || policy.allowCidrs.length > 0 || policy.allowDomains.length > 0;
  const proxied = guard.proxyPorts && (policy.allowDomains.length > 0 || policy.ruleDomains.length > 0);
  const egress: string[] = [];
  if (reachesSomething && guard.resolvers.length > 0) {
    egress.push(`ip daddr ${set(guard.resolvers)} meta l4proto { tcp, udp } th dport 53 accept`);
  }
  if (guard.denied.length > 0) egress.push(`ip daddr ${set(guard.denied)} drop`);
  if (policy.allowCidrs.length > 0) egress.push(`ip daddr ${set(policy.allowCidrs)} accept`);
  if (policy.denyCidrs.length > 0) egress.push(`ip daddr ${set(policy.denyCidrs)} drop`);
  egress.push("accept");

  const redirect: string[] = [];
  const toProxy: string[] = [];
  if (proxied && guard.proxyPorts) {
    const { http, tls } = guard.proxyPorts;
    if (guard.denied.length > 0) redirect.push(`ip daddr ${set(guard.denied)} return`);
    if (policy.allowCidrs.length > 0) redirect.push(`ip daddr ${set(policy.allowCidrs)} return`);
    // Rules transform requests to allowed destinations too: those go through the proxy as well.
    if (policy.ruleDomains.length === 0) {
      if (policy.denyCidrs.length === 0) redirect.push("return");
      else if (!denyAll) redirect.push(`ip daddr != ${set(policy.denyCidrs)} return`);
    }
    redirect.push(`tcp dport 443 dnat to ${hostIp}:${tls}`, `tcp dport 80 dnat to ${hostIp}:${http}`);
    toProxy.push(`ip daddr ${hostIp} tcp dport { ${http}, ${tls} } accept`);
  }
  const rules = (xs: string[]) => xs.map((r) => `    ${r};`).join("\n");
  return `
table ip aenv
delete table ip aenv
table ip aenv {
  chain to_guest { type nat hook prerouting priority dstnat; iifname "uplink" ip daddr != ${GUEST_IP} dnat to ${GUEST_IP}; }
  chain steer {
    type nat hook prerouting priority dstnat; policy accept;
    iifname != "gw" return;
${rules(redirect)}
  }
  chain from_guest { type nat hook postrouting priority srcnat; oifname "uplink" masquerade; }
  chain egress {
${rules(egress)}
  }
  chain to_proxy {
${rules(toProxy)}
  }
  chain forwarding {
    type filter hook forward priority filter; policy drop;
    ct state established,related accept;
    iifname "uplink" oifname "gw" accept;
    iifname "gw" ct status dnat jump to_proxy;
    iifname "gw" ip daddr ${cidr} drop;
    iifname "gw" ip daddr ${hostIp} drop;
    iifname "gw" oifname "uplink" jump egress;
  }
  chain guard_in { type filter hook input priority filter; policy accept; iifname "gw" ct state new drop; }
}
`;
}
