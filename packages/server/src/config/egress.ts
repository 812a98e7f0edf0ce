/** What sandboxes may reach: the denied ranges and the egress proxy's static hosts and CAs. */
import { isIPv4 } from "node:net";
import { ConfigError } from "@aenv/edge/config-values";
import { normaliseCidr } from "../network/policy.js";

export interface EgressConfig {
  /** IPv4 networks no sandbox may reach, whatever its rules (normalised a.b.c.d/n). */
  deniedRanges: string[];
  /** Static answers the egress proxy uses before DNS (split horizon, tests): name → addresses. */
  hosts: Record<string, string[]>;
  /** Extra CA certificates (PEM file) the egress proxy trusts for upstream TLS it re-encrypts. */
  upstreamCaFile?: string;
  /** The egress proxy's own CA (key and certificate); nodes of a cluster should share one. */
  caDir?: string;
  /**
   * Networks a sandbox's own egressProxy may be at although they are denied or the host's
   * (a proxy the operator runs next to the server); elsewhere such an address is refused.
   */
  proxyAllowed: string[];
}

/**
 * Link-local and cloud metadata, loopback, private (RFC 1918, CGNAT), this-network,
 * multicast and reserved ranges: closed to sandboxes unless the operator lists otherwise.
 */
export const DEFAULT_DENIED_RANGES = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "224.0.0.0/4",
  "240.0.0.0/4",
];

export function egressConfig(
  denied: string | undefined,
  hosts: string | undefined,
  caFile: string | undefined,
  caDir: string | undefined,
  proxyAllowed?: string,
): EgressConfig {
  const cidrs = (what: string, list: string) =>
    list
      .split(",")
      .map((c) => c.trim())
      .filter(Boolean)
      .map((c) => {
        const n = normaliseCidr(c);
        if (!n) throw new ConfigError(`network ${what}: '${c}' is not an IPv4 address or CIDR`);
        return n;
      });
  const deniedRanges = denied === undefined ? DEFAULT_DENIED_RANGES : cidrs("denied ranges", denied);
  const map: Record<string, string[]> = {};
  for (const pair of (hosts ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean)) {
    const [name, ip] = pair.split("=").map((x) => x.trim());
    if (!name || !ip || !isIPv4(ip)) throw new ConfigError(`network egress hosts: expected name=IPv4, got '${pair}'`);
    const key = name.toLowerCase();
    map[key] = [...(map[key] ?? []), ip];
  }
  return {
    deniedRanges,
    hosts: map,
    proxyAllowed: cidrs("egress proxy allowed", proxyAllowed ?? ""),
    ...(caFile ? { upstreamCaFile: caFile } : {}),
    ...(caDir ? { caDir } : {}),
  };
}
