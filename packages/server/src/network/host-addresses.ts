import { readFileSync } from "node:fs";
import { isIPv4 } from "node:net";
import { networkInterfaces } from "node:os";
import { inCidrs } from "./policy.js";

/**
 * "This network" (a connection to 0.0.0.0 reaches the host's own listeners) and loopback: the
 * host itself on every Linux machine, whatever its routes say.
 */
const ALWAYS_HOST = ["0.0.0.0/8", "127.0.0.0/8"];

/**
 * Addresses come and go (DHCP, an operator's `ip addr add`); reading the kernel's table on each
 * connection would parse an entry per slot link every time, so it is read again at most this often.
 */
const REFRESH_MS = 1000;

/**
 * The kernel's LOCAL routes out of /proc/net/fib_trie (this network namespace), as CIDRs: every
 * address the host accepts connections at, including those on links that are down (which
 * `os.networkInterfaces()` leaves out) and whole local ranges (`ip route add local …`).
 */
export function parseLocalRoutes(fibTrie: string): string[] {
  const out = new Set<string>();
  let leaf: string | undefined;
  for (const line of fibTrie.split("\n")) {
    const l = /^\s*\|-- (\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})\s*$/.exec(line);
    if (l) {
      leaf = l[1];
      continue;
    }
    const r = /^\s*\/(\d{1,2}) \S+ LOCAL\s*$/.exec(line);
    if (r && leaf) out.add(`${leaf}/${r[1]}`);
    else if (!/^\s*\/\d/.test(line)) leaf = undefined;
  }
  return [...out];
}

function readLocalRoutes(): string[] {
  let routes: string[] = [];
  try {
    routes = parseLocalRoutes(readFileSync("/proc/net/fib_trie", "utf8"));
  } catch {
    // Not Linux, or /proc not mounted: the interfaces below are what is known.
  }
  const ifaces = Object.values(networkInterfaces())
    .flatMap((list) => list ?? [])
    .filter((a) => a.family === "IPv4")
    .map((a) => `${a.address}/32`);
  return [...routes, ...ifaces];
}

/**
 * What a sandbox must never reach through the host: the host's own addresses (every local
 * route, loopback, 0.0.0.0) and the slot range (the host's end of each slot link, and other
 * sandboxes' slot addresses). The egress proxy connects from the host, so a destination here
 * would be a service listening only for the host, or another sandbox behind its router.
 */
export class HostAddresses {
  private local: string[] = [];
  private readAt = Number.NEGATIVE_INFINITY;

  constructor(
    /** Ranges that are the host's besides its local routes (the slot range). */
    private readonly ranges: string[],
    private readonly read: () => string[] = readLocalRoutes,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether `ip` is the host. Anything but a plain IPv4 address counts: the proxy dials IPv4 only. */
  has(ip: string): boolean {
    if (!isIPv4(ip)) return true;
    if (inCidrs(ip, ALWAYS_HOST) || inCidrs(ip, this.ranges)) return true;
    if (this.now() - this.readAt >= REFRESH_MS) {
      this.local = this.read();
      this.readAt = this.now();
    }
    return inCidrs(ip, this.local);
  }
}
