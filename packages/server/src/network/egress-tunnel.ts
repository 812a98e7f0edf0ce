import { createServer, type Server, type Socket } from "node:net";
import type { Logger } from "pino";
import { originalDestination } from "./conntrack.js";
import type { EgressSandbox } from "./egress-proxy.js";
import { HostAddresses } from "./host-addresses.js";
import { inCidrs } from "./policy.js";
import { dialThroughProxy } from "./proxy-dial.js";

export interface EgressTunnelOptions {
  log: Logger;
  sandboxFor(sourceIp: string): EgressSandbox | undefined;
  /** Ranges no sandbox reaches (the operator's list). */
  denied: string[];
  slotCidr: string;
  /** Whether the server may connect to a user's proxy at this address. */
  proxyPermitted(ip: string): boolean;
  /** Extra roots for proxies reached over TLS. */
  proxyCa?: string;
  /** Where the original destination of a redirected connection is read (tests). */
  lookup?: typeof originalDestination;
}

const IDLE_TIMEOUT_MS = 10 * 60_000;

/**
 * The host side of `network.egressProxy`. The host redirects new TCP connections from slots
 * whose sandbox names a proxy (those its router already let through: deny rules come first)
 * to this listener; it reads where each was going and opens it through the user's proxy. The
 * proxy's credentials live only here; the sandbox sees an ordinary connection. Fails closed:
 * a proxy that refuses or is unreachable closes the sandbox's connection, never a direct one.
 */
export class EgressTunnel {
  private server: Server | undefined;
  private port = 0;
  private readonly sockets = new Set<Socket>();
  private readonly host: HostAddresses;

  constructor(private readonly o: EgressTunnelOptions) {
    this.host = new HostAddresses([o.slotCidr]);
  }

  listen(): Promise<number> {
    const server = createServer((s) => this.accept(s));
    server.on("error", (err) => this.o.log.error({ err }, "egress tunnel listener failed"));
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "0.0.0.0", () => {
        const addr = server.address();
        this.port = typeof addr === "object" && addr ? addr.port : 0;
        resolve(this.port);
      });
    });
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    const server = this.server;
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }

  private track(s: Socket): void {
    this.sockets.add(s);
    s.on("close", () => this.sockets.delete(s));
    s.on("error", () => s.destroy());
  }

  private accept(socket: Socket): void {
    this.track(socket);
    socket.pause();
    const source = (socket.remoteAddress ?? "").replace(/^::ffff:/, "");
    const local = (socket.localAddress ?? "").replace(/^::ffff:/, "");
    const sandbox = this.o.sandboxFor(source);
    const proxy = sandbox?.spec?.egressProxy;
    // Only the sandbox's own link delivers here (the host's nat rule redirects to its address).
    if (!sandbox || !proxy || local !== sandbox.hostIp) {
      socket.destroy();
      return;
    }
    this.open(socket, sandbox, source).catch((err) => {
      this.o.log.info({ sandboxID: sandbox.id, err: (err as Error).message }, "egress tunnel refused");
      socket.destroy();
    });
  }

  private async open(socket: Socket, sandbox: EgressSandbox, source: string): Promise<void> {
    const lookup = this.o.lookup ?? originalDestination;
    const dst = await lookup({ ip: source, port: socket.remotePort ?? 0 }, this.port);
    if (!dst) throw new Error("original destination not found");
    const { policy } = sandbox;
    // The router decided already; checked again here so a stale set element or rule cannot widen it.
    const allowed =
      !this.host.has(dst.ip) &&
      !inCidrs(dst.ip, this.o.denied) &&
      (inCidrs(dst.ip, policy.allowCidrs) || !inCidrs(dst.ip, policy.denyCidrs));
    if (!allowed) throw new Error(`destination ${dst.ip} is not allowed`);
    const proxy = sandbox.spec?.egressProxy;
    if (!proxy) throw new Error("no proxy");
    const up = await dialThroughProxy(
      proxy,
      { host: dst.ip, port: dst.port },
      { permitted: this.o.proxyPermitted, ...(this.o.proxyCa ? { ca: this.o.proxyCa } : {}) },
    );
    splice(socket, up.socket, up.head, (s) => this.track(s));
  }
}

/** Bytes both ways between a sandbox's connection and its upstream; either end closing closes both. */
export function splice(client: Socket, upstream: Socket, head: Buffer, track: (s: Socket) => void): void {
  track(upstream);
  if (client.destroyed) {
    upstream.destroy();
    return;
  }
  upstream.on("close", () => client.destroy());
  client.on("close", () => upstream.destroy());
  client.setTimeout(IDLE_TIMEOUT_MS, () => client.destroy());
  if (head.length > 0) client.write(head);
  client.pipe(upstream);
  upstream.pipe(client);
  client.resume();
  upstream.resume();
}
