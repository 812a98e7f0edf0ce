/**
 * Who may hold a listener's connections. A global cap alone lets one client take them all
 * with idle keep-alive connections, after which every other client gets an empty reply; so:
 *
 * - each client address may hold at most `maxConnectionsPerClient` connections that have not
 *   carried an authenticated request (an API key holder's connections do not count: a gateway
 *   or a busy SDK host keeps its pool), past which its new ones are closed at accept;
 * - at the global cap a newcomer is not refused while an idle connection exists: the idle one
 *   of the client holding the most connections is closed instead (unauthenticated ones first).
 *   A connection is idle between requests, and before its first request head has been
 *   read (a slow client still sending its head counts: that is the attack). Upgraded tunnels and
 *   requests in flight are never closed here.
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { isIPv6 } from "node:net";
import type { Duplex } from "node:stream";

export interface ConnectionLimits {
  /** Connections past this many make room by closing an idle one, or are refused; 0: no cap. */
  maxConnections: number;
  /** Unauthenticated connections one client address may hold; 0: no cap. */
  maxConnectionsPerClient: number;
}

export type ShedReason = "per_client" | "full" | "evicted_idle";

export interface GuardHooks {
  /** Whether a request proves its client (a valid API key): its connection stops counting. */
  trusted?: (req: IncomingMessage) => boolean;
  /** A connection refused at accept, or an idle one closed to make room. */
  onShed?: (reason: ShedReason) => void;
}

interface Conn {
  socket: Duplex;
  client: Client;
  /** Requests read and not yet answered. */
  active: number;
  trusted: boolean;
  upgraded: boolean;
  gone: boolean;
}

interface Client {
  key: string;
  conns: Set<Conn>;
  untrusted: number;
}

/**
 * The client a connection counts against: its IPv4 address, or the /64 of an IPv6 one (one
 * host is given a whole /64, so a single address per connection is no identity there).
 */
export function clientKey(address: string | undefined): string {
  const a = (address ?? "").replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, "");
  if (!isIPv6(a)) return a;
  const [head = "", tail = ""] = a.split("::");
  const left = head ? head.split(":") : [];
  const right = tail ? tail.split(":") : [];
  const groups = a.includes("::") ? [...left, ...Array(8 - left.length - right.length).fill("0"), ...right] : left;
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g || "0", 16).toString(16))
    .join(":")}::/64`;
}

export class ConnectionGuard {
  private readonly clients = new Map<string, Client>();
  private readonly bySocket = new WeakMap<Duplex, Conn>();
  private total = 0;

  constructor(
    private readonly limits: ConnectionLimits,
    private readonly hooks: GuardHooks = {},
  ) {}

  /** Connections held now (for tests and metrics). */
  get size(): number {
    return this.total;
  }

  /** Applies the guard to a server: call before it listens, and call `request` from its handler. */
  attach(server: Server): void {
    // Before Node's own listener: a refused connection never gets an HTTP parser.
    server.prependListener("connection", (socket: Duplex) => this.admit(socket));
    server.prependListener("upgrade", (req: IncomingMessage) => {
      const c = this.bySocket.get(req.socket);
      if (c) c.upgraded = true;
    });
  }

  /** A request was read on a connection: it is busy until answered. */
  request(req: IncomingMessage, res: ServerResponse): void {
    const c = this.bySocket.get(req.socket);
    if (!c) return;
    c.active++;
    res.once("close", () => c.active--);
    if (!c.trusted && this.hooks.trusted?.(req)) {
      c.trusted = true;
      c.client.untrusted--;
    }
  }

  private admit(socket: Duplex & { remoteAddress?: string }): void {
    const key = clientKey(socket.remoteAddress);
    const client = this.clients.get(key) ?? { key, conns: new Set<Conn>(), untrusted: 0 };
    const perClient = this.limits.maxConnectionsPerClient;
    if (perClient > 0 && client.untrusted >= perClient) {
      this.refuse(socket, "per_client");
      return;
    }
    if (this.limits.maxConnections > 0 && this.total >= this.limits.maxConnections && !this.evictIdle()) {
      this.refuse(socket, "full");
      return;
    }
    const c: Conn = { socket, client, active: 0, trusted: false, upgraded: false, gone: false };
    this.clients.set(key, client);
    client.conns.add(c);
    client.untrusted++;
    this.total++;
    this.bySocket.set(socket, c);
    socket.once("close", () => this.forget(c));
  }

  private refuse(socket: Duplex, reason: ShedReason): void {
    this.hooks.onShed?.(reason);
    socket.destroy();
  }

  /** Closes one idle connection of the client holding the most; false when none is idle. */
  private evictIdle(): boolean {
    const clients = [...this.clients.values()].sort((a, b) => b.conns.size - a.conns.size);
    for (const trustedToo of [false, true]) {
      for (const client of clients) {
        for (const c of client.conns) {
          if (c.active > 0 || c.upgraded || (c.trusted && !trustedToo)) continue;
          this.forget(c);
          this.hooks.onShed?.("evicted_idle");
          c.socket.destroy();
          return true;
        }
      }
    }
    return false;
  }

  private forget(c: Conn): void {
    if (c.gone) return;
    c.gone = true;
    this.total--;
    c.client.conns.delete(c);
    if (!c.trusted) c.client.untrusted--;
    if (c.client.conns.size === 0) this.clients.delete(c.client.key);
  }
}
