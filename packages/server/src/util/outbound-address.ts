/**
 * Which addresses the server may connect to on a caller's behalf (image registries, webhook
 * receivers): a URL an API caller chooses must not reach loopback services, the node's own
 * networks or cloud metadata unless the operator allows private addresses.
 */
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP, isIPv4 } from "node:net";
import { Agent } from "undici";

/** public: anywhere; private: loopback, private, link-local and reserved ranges; metadata: never. */
export type AddressClass = "public" | "private" | "metadata";

const metadata = new BlockList();
// Cloud instance metadata (AWS, GCP, Azure, OpenStack: 169.254.169.254; the whole link-local
// range, which holds other providers' services too), Alibaba's, and AWS's over IPv6.
metadata.addSubnet("169.254.0.0", 16, "ipv4");
metadata.addAddress("100.100.100.200", "ipv4");
metadata.addSubnet("fd00:ec2::", 32, "ipv6");

const nonPublic = new BlockList();
for (const [net, bits] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  nonPublic.addSubnet(net, bits, "ipv4");
}
for (const [net, bits] of [
  ["::", 128],
  ["::1", 128],
  ["100::", 64],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
] as const) {
  nonPublic.addSubnet(net, bits, "ipv6");
}

/** The IPv4 address inside an IPv4-mapped, -compatible or NAT64 IPv6 address. */
function embeddedIpv4(ip6: string): string | undefined {
  let canonical: string;
  try {
    canonical = new URL(`http://[${ip6}]/`).hostname;
  } catch {
    return undefined;
  }
  const m = /^\[(?:::ffff:|64:ff9b::|::)([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/.exec(canonical);
  if (!m) return undefined;
  const hi = Number.parseInt(m[1] as string, 16);
  const lo = Number.parseInt(m[2] as string, 16);
  return [hi >> 8, hi & 255, lo >> 8, lo & 255].join(".");
}

export function classifyAddress(address: string): AddressClass {
  const ip = address.replace(/%.*$/, "");
  const v4 = isIPv4(ip) ? ip : embeddedIpv4(ip);
  if (v4 !== undefined) {
    if (metadata.check(v4, "ipv4")) return "metadata";
    return nonPublic.check(v4, "ipv4") ? "private" : "public";
  }
  if (metadata.check(ip, "ipv6")) return "metadata";
  return nonPublic.check(ip, "ipv6") ? "private" : "public";
}

export type Resolver = (hostname: string) => Promise<LookupAddress[]>;

export type LookupCallback = (err: Error | null, address: string | LookupAddress[], family?: number) => void;

export const systemResolve: Resolver = (hostname) =>
  new Promise((resolve, reject) =>
    dnsLookup(hostname, { all: true }, (err, addrs) => (err ? reject(err) : resolve(addrs))),
  );

export interface OutboundGuardOptions {
  /** Loopback, private and link-local addresses too (never metadata ones). */
  allowPrivate?: boolean;
  /** Name resolution (default: the system's, as every other connection of the server). */
  resolve?: Resolver;
  /** For tests: how an address is classed (default `classifyAddress`). */
  classify?: (address: string) => AddressClass;
}

/**
 * Connections to caller-chosen hosts: literal addresses are checked before connecting, and
 * names are resolved by the connection's own `lookup`, which drops the addresses it may not
 * use, so the address checked is the address connected to (no second resolution a rebinding
 * DNS server could answer differently). `refuse` words the error for the caller's domain.
 */
export class OutboundGuard {
  /** An undici dispatcher whose connections go only where this guard allows. */
  readonly agent: Agent;

  constructor(
    private readonly o: OutboundGuardOptions,
    private readonly refuse: (cls: "private" | "metadata", address: string, host: string) => Error,
    private readonly noAddress: (host: string) => Error,
  ) {
    this.agent = new Agent({
      connect: { lookup: (host: string, opts: { all?: boolean }, cb: LookupCallback) => this.lookup(host, opts, cb) },
    });
  }

  /** Why this address may not be connected to, or undefined when it may. */
  refusal(address: string, host: string): Error | undefined {
    const cls = (this.o.classify ?? classifyAddress)(address);
    if (cls === "public" || (cls === "private" && this.o.allowPrivate)) return undefined;
    return this.refuse(cls, address, host);
  }

  /** Throws when a URL's host is a literal address this guard refuses (names are checked on connect). */
  checkLiteral(url: URL): void {
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (isIP(host)) {
      const refused = this.refusal(host, url.host);
      if (refused) throw refused;
    }
  }

  /**
   * Throws unless the URL's host may be reached now: a literal address checked, a name
   * resolved and at least one of its addresses allowed (a name that does not resolve is
   * `noAddress`). Connections check again on their own (see the class).
   */
  async checkReachable(url: URL): Promise<void> {
    this.checkLiteral(url);
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    if (isIP(host)) return;
    const addrs = await (this.o.resolve ?? systemResolve)(host).catch(() => []);
    this.allowedOf(host, addrs);
  }

  /** The addresses of `hostname` this guard allows; throws the refusal, or `noAddress`, when none is. */
  private allowedOf(hostname: string, addrs: LookupAddress[]): LookupAddress[] {
    const usable = addrs.filter((a) => !this.refusal(a.address, hostname));
    if (!usable.length) throw this.refusal(addrs[0]?.address ?? "", hostname) ?? this.noAddress(hostname);
    return usable;
  }

  private lookup(hostname: string, opts: { all?: boolean }, cb: LookupCallback): void {
    (this.o.resolve ?? systemResolve)(hostname).then(
      (addrs) => {
        let usable: LookupAddress[];
        try {
          usable = this.allowedOf(hostname, addrs);
        } catch (err) {
          cb(err as Error, []);
          return;
        }
        const first = usable[0] as LookupAddress;
        if (opts.all) cb(null, usable);
        else cb(null, first.address, first.family);
      },
      (err: Error) => cb(err, []),
    );
  }
}
