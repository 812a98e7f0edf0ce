import { isIPv4, isIPv6 } from "node:net";
import { InvalidRequestError, NotImplementedError } from "@aenv/edge/errors";
import { ENVD_PORT } from "@aenv/protocol";
import { type EgressProxySpec, validateEgressProxy } from "./egress-proxy-config.js";

/**
 * A sandbox's network settings as the client gave them (E2B `SandboxNetworkConfig`), kept in
 * its record and passed on to resumes, snapshots and forks.
 */
export interface NetworkSpec {
  allowOut?: string[];
  denyOut?: string[];
  /** Per-domain header transforms for outbound HTTP(S); values may hold `${e2b.secrets.NAME}`. */
  rules?: Record<string, NetworkRule[]>;
  /** false: the proxy asks for the traffic access token on every sandbox port but envd's. */
  allowPublicTraffic?: boolean;
  /** Host header sent to sandbox ports instead of the client's; `${PORT}` is replaced. */
  maskRequestHost?: string;
  /** The user's proxy allowed TCP leaves through (host side only; answers leave out the password). */
  egressProxy?: EgressProxySpec;
  /** Sandbox ports the proxy reaches over TLS (certificates not verified), not plain HTTP. */
  httpsPorts?: number[];
}

export interface NetworkRule {
  transform?: { headers?: Record<string, string> };
}

/** The outbound policy a slot enforces, compiled from a NetworkSpec and allow_internet_access. */
export interface EgressPolicy {
  /** IPv4 networks that are let through even if denied (normalised a.b.c.d/n). */
  allowCidrs: string[];
  /** IPv4 networks that are dropped; 0.0.0.0/0 for "nothing but what is allowed". */
  denyCidrs: string[];
  /** Domain patterns (`example.com`, `*.example.com`) let through by the egress proxy. */
  allowDomains: string[];
  /** Domain patterns whose HTTP(S) requests get headers injected (they must be allowed too). */
  ruleDomains: string[];
  /** Allowed TCP leaves through the sandbox's egressProxy (the host redirects it to the tunnel). */
  tunnel: boolean;
}

export const ALL_TRAFFIC = "0.0.0.0/0";
const MAX_ENTRIES = 1000;
const DOMAIN_LABEL = /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/;
/** What node:http sends as a header value (RFC 9110 field-value): anything else would throw there. */
export const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

export type Destination = { kind: "cidr"; cidr: string } | { kind: "ipv6" } | { kind: "domain"; pattern: string };

function ipv4ToInt(ip: string): number {
  return ip.split(".").reduce((n, p) => n * 256 + Number(p), 0);
}

function intToIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}

/** `a.b.c.d` or `a.b.c.d/n` as its network (host bits cleared: nft refuses them). */
export function normaliseCidr(entry: string): string | undefined {
  const [ip, bits, extra] = entry.split("/");
  if (extra !== undefined || !ip || !isIPv4(ip)) return undefined;
  const n = bits === undefined ? 32 : /^\d{1,2}$/.test(bits) ? Number(bits) : Number.NaN;
  if (!(n >= 0 && n <= 32)) return undefined;
  const mask = n === 0 ? 0 : (0xffffffff << (32 - n)) >>> 0;
  return `${intToIpv4((ipv4ToInt(ip) & mask) >>> 0)}/${n}`;
}

/** A domain pattern, lowercased: exact names and one leading `*.` wildcard; a bare `*` is not one. */
export function normaliseDomain(entry: string): string | undefined {
  const d = entry.toLowerCase().replace(/\.$/, "");
  const name = d.startsWith("*.") ? d.slice(2) : d;
  if (name.length === 0 || name.length > 253) return undefined;
  const labels = name.split(".");
  if (labels.length < 1 || !labels.every((l) => DOMAIN_LABEL.test(l))) return undefined;
  // All-numeric names are malformed addresses, not domains.
  if (labels.every((l) => /^\d+$/.test(l))) return undefined;
  return d;
}

export function parseDestination(entry: string): Destination | undefined {
  if (typeof entry !== "string" || entry.length === 0 || entry.length > 260) return undefined;
  const cidr = normaliseCidr(entry);
  if (cidr) return { kind: "cidr", cidr };
  const [ip, bits] = entry.split("/");
  if (ip && isIPv6(ip) && (bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= 128))) {
    return { kind: "ipv6" };
  }
  const pattern = normaliseDomain(entry);
  return pattern ? { kind: "domain", pattern } : undefined;
}

/** Whether a host name matches a pattern: wildcards match subdomains at any depth, not the apex. */
export function domainMatches(pattern: string, host: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, "");
  if (pattern.startsWith("*.")) return h.endsWith(pattern.slice(1)) && h.length > pattern.length - 1;
  return h === pattern;
}

/** The rule set for a host: an exact key first, then the longest matching wildcard (not merged). */
export function rulesFor(rules: Record<string, NetworkRule[]> | undefined, host: string): NetworkRule[] | undefined {
  if (!rules) return undefined;
  const h = host.toLowerCase().replace(/\.$/, "");
  if (rules[h]) return rules[h];
  let best: string | undefined;
  for (const k of Object.keys(rules)) {
    if (k.startsWith("*.") && domainMatches(k, h) && (!best || k.length > best.length)) best = k;
  }
  return best ? rules[best] : undefined;
}

/**
 * Checks a client's network settings and returns them normalised (domains lowercased,
 * networks without host bits). Unsupported options are refused rather than ignored.
 */
export function validateNetworkSpec(raw: {
  allowOut?: string[];
  denyOut?: string[];
  rules?: Record<string, NetworkRule[]>;
  allowPublicTraffic?: boolean;
  maskRequestHost?: string;
  egressProxy?: unknown;
  httpsPorts?: number[];
}): NetworkSpec {
  const egressProxy = validateEgressProxy(raw.egressProxy);
  if (raw.httpsPorts?.includes(ENVD_PORT)) {
    throw new InvalidRequestError(`network.httpsPorts: the envd port (${ENVD_PORT}) cannot be listed`);
  }
  const list = (name: "allowOut" | "denyOut", v: string[] | undefined): string[] | undefined => {
    if (v === undefined) return undefined;
    if (v.length > MAX_ENTRIES) throw new InvalidRequestError(`network.${name}: at most ${MAX_ENTRIES} entries`);
    return v.map((e) => {
      const d = parseDestination(e);
      if (!d)
        throw new InvalidRequestError(`network.${name}: '${String(e).slice(0, 80)}' is not an IP, CIDR or domain`);
      if (d.kind === "domain" && name === "denyOut") {
        throw new InvalidRequestError(`network.denyOut: domain names are not supported for deny rules ('${e}')`);
      }
      return d.kind === "cidr" ? d.cidr : d.kind === "domain" ? d.pattern : e.toLowerCase();
    });
  };
  const spec: NetworkSpec = {};
  const allow = list("allowOut", raw.allowOut);
  const deny = list("denyOut", raw.denyOut);
  if (allow) spec.allowOut = allow;
  if (deny) spec.denyOut = deny;
  if (raw.rules) {
    const keys = Object.keys(raw.rules);
    if (keys.length > MAX_ENTRIES) throw new InvalidRequestError(`network.rules: at most ${MAX_ENTRIES} hosts`);
    const rules: Record<string, NetworkRule[]> = {};
    for (const k of keys) {
      const pattern = normaliseDomain(k);
      if (!pattern) throw new InvalidRequestError(`network.rules: '${k.slice(0, 80)}' is not a domain or *.domain`);
      const list = raw.rules[k] ?? [];
      for (const r of list) {
        for (const [h, v] of Object.entries(r.transform?.headers ?? {})) {
          if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$/.test(h) || !HEADER_VALUE.test(v) || v.length > 16_384) {
            throw new InvalidRequestError(`network.rules['${k}']: header '${h.slice(0, 80)}' is not a valid header`);
          }
          if (v.includes("${e2b.identity.")) {
            throw new NotImplementedError(
              "network.rules: workload identity tokens (iam) are not offered by this server: it is no JWT-SVID issuer",
            );
          }
        }
      }
      rules[pattern] = list;
    }
    spec.rules = rules;
  }
  if (raw.allowPublicTraffic !== undefined) spec.allowPublicTraffic = raw.allowPublicTraffic;
  if (raw.maskRequestHost !== undefined) {
    if (/[\r\n\0\s]/.test(raw.maskRequestHost) || raw.maskRequestHost.length > 253 + 16) {
      throw new InvalidRequestError("network.maskRequestHost is not a valid host");
    }
    spec.maskRequestHost = raw.maskRequestHost;
  }
  if (egressProxy) spec.egressProxy = egressProxy;
  if (raw.httpsPorts && raw.httpsPorts.length > 0) spec.httpsPorts = [...new Set(raw.httpsPorts)].sort((a, b) => a - b);
  return spec;
}

/** What a slot enforces for these settings. allow_internet_access: false is denyOut 0.0.0.0/0. */
export function compileEgress(spec: NetworkSpec | undefined, allowInternet: boolean): EgressPolicy {
  const allowCidrs: string[] = [];
  const allowDomains: string[] = [];
  for (const e of spec?.allowOut ?? []) {
    const d = parseDestination(e);
    if (d?.kind === "cidr") allowCidrs.push(d.cidr);
    else if (d?.kind === "domain") allowDomains.push(d.pattern);
  }
  const denyCidrs = (spec?.denyOut ?? []).flatMap((e) => {
    const d = parseDestination(e);
    return d?.kind === "cidr" ? [d.cidr] : [];
  });
  if (!allowInternet && !denyCidrs.includes(ALL_TRAFFIC)) denyCidrs.push(ALL_TRAFFIC);
  return {
    allowCidrs: [...new Set(allowCidrs)],
    denyCidrs: [...new Set(denyCidrs)],
    allowDomains: [...new Set(allowDomains)],
    ruleDomains: Object.keys(spec?.rules ?? {}),
    tunnel: spec?.egressProxy !== undefined,
  };
}

/** Whether an IPv4 address lies in one of these networks. */
export function inCidrs(ip: string, cidrs: string[]): boolean {
  if (!isIPv4(ip)) return false;
  const n = ipv4ToInt(ip);
  return cidrs.some((c) => {
    const [base, bits] = c.split("/") as [string, string];
    const b = Number(bits);
    const mask = b === 0 ? 0 : (0xffffffff << (32 - b)) >>> 0;
    return (n & mask) >>> 0 === (ipv4ToInt(base) & mask) >>> 0;
  });
}
