// "Hosts" on one machine: each a network namespace with its own address on a bridge in the
// root namespace, so a test can cut one off from others while its processes live, and heal it.
// Processes enter a host's namespace with `nsenter --net` (network only): `ip netns exec`
// would also mount a fresh /sys, hiding the cgroup tree runsc needs. A node started this way
// makes its sandboxes' namespaces and veths inside its host's namespace, reachable from it.
import { spawnSync } from "node:child_process";

function run(args: string[]): void {
  const r = spawnSync(args[0] as string, args.slice(1), { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${args.join(" ")}: ${r.stderr || r.stdout}`);
}

export interface Host {
  name: string;
  address: string;
  /** The command prefix that runs a program in this host's network namespace. */
  wrap: string[];
}

export class Hosts {
  private readonly hosts = new Map<string, Host & { ns: string; veth: string }>();
  private made = false;

  /**
   * `prefix` (a few letters) names the bridge, namespaces and veths; `subnet` is the first
   * three octets of a /24 no one else uses (the bridge is .1, hosts from .10).
   */
  constructor(
    private readonly prefix: string,
    private readonly subnet: string,
  ) {}

  get bridgeAddress(): string {
    return `${this.subnet}.1`;
  }

  private setUp(): void {
    if (this.made) return;
    const br = `${this.prefix}br`;
    spawnSync("ip", ["link", "del", br]);
    run(["ip", "link", "add", br, "type", "bridge"]);
    run(["ip", "addr", "add", `${this.bridgeAddress}/24`, "dev", br]);
    run(["ip", "link", "set", br, "up"]);
    this.made = true;
  }

  /** A new host with its own namespace and address. */
  add(name: string): Host {
    this.setUp();
    const i = this.hosts.size;
    const ns = `${this.prefix}-${name}`;
    const veth = `${this.prefix}h${i}`;
    const address = `${this.subnet}.${10 + i}`;
    spawnSync("ip", ["netns", "del", ns]);
    spawnSync("ip", ["link", "del", veth]);
    run(["ip", "netns", "add", ns]);
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", `${veth}n`]);
    run(["ip", "link", "set", `${veth}n`, "netns", ns]);
    run(["ip", "link", "set", veth, "master", `${this.prefix}br`, "up"]);
    const inNs = (args: string[]) => run(["ip", "netns", "exec", ns, ...args]);
    inNs(["ip", "link", "set", "lo", "up"]);
    inNs(["ip", "addr", "add", `${address}/24`, "dev", `${veth}n`]);
    inNs(["ip", "link", "set", `${veth}n`, "up"]);
    inNs(["ip", "route", "add", "default", "via", this.bridgeAddress]);
    const host = { name, address, ns, veth, wrap: ["nsenter", `--net=/run/netns/${ns}`] };
    this.hosts.set(name, host);
    return host;
  }

  private get(name: string) {
    const h = this.hosts.get(name);
    if (!h) throw new Error(`no host ${name}`);
    return h;
  }

  /**
   * Cuts a host off from the others named (packets dropped both ways, nothing reset, as a
   * partition would), with an nftables table of its own in the host's namespace. The root
   * namespace (the test itself) still reaches it.
   */
  cut(name: string, from: string[]): void {
    const h = this.get(name);
    const peers = from.map((f) => this.get(f).address).join(", ");
    const rules = [
      `table inet ${this.prefix}cut {`,
      `  chain in { type filter hook input priority -300; policy accept; ip saddr { ${peers} } drop; }`,
      `  chain out { type filter hook output priority -300; policy accept; ip daddr { ${peers} } drop; }`,
      "}",
    ].join("\n");
    const r = spawnSync("ip", ["netns", "exec", h.ns, "nft", "-f", "-"], { input: rules, encoding: "utf8" });
    if (r.status !== 0) throw new Error(`cutting ${name} off: ${r.stderr}`);
  }

  heal(name: string): void {
    const h = this.get(name);
    run(["ip", "netns", "exec", h.ns, "nft", "delete", "table", "inet", `${this.prefix}cut`]);
  }

  close(): void {
    for (const h of this.hosts.values()) {
      spawnSync("ip", ["netns", "del", h.ns]);
      spawnSync("ip", ["link", "del", h.veth]);
    }
    this.hosts.clear();
    if (this.made) spawnSync("ip", ["link", "del", `${this.prefix}br`]);
    this.made = false;
  }
}
