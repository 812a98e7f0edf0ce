import { lookup } from "node:dns/promises";
import { connect, createServer, type Server, type Socket } from "node:net";
import type { Logger } from "pino";
import { parseClientHelloSni, parseHttpHost } from "./client-hello.js";
import { HostAddresses } from "./host-addresses.js";
import { domainMatches, type EgressPolicy, inCidrs, type NetworkSpec, rulesFor } from "./policy.js";
import { dialThroughProxy } from "./proxy-dial.js";

/** What the proxy needs to know about the sandbox behind a connection. */
export interface EgressSandbox {
  id: string;
  /** Its API key (absent: the operator's): its rules may name only that key's secrets. */
  owner?: string;
  /** The host's end of the sandbox's slot link: the one address its router sends proxied traffic to. */
  hostIp: string;
  policy: EgressPolicy;
  spec: NetworkSpec | undefined;
}

/** Hands a connection whose requests get headers injected to the TLS/HTTP rewriter. */
export interface EgressRewriter {
  handle(o: {
    socket: Socket;
    head: Buffer;
    tls: boolean;
    host: string;
    sandbox: EgressSandbox;
    /** Addresses the upstream may be reached at (already checked against the policy). */
    addresses: string[];
  }): void;
}

export interface EgressProxyOptions {
  log: Logger;
  /** The sandbox a connection comes from, by its slot address; undefined: not one of ours. */
  sandboxFor(sourceIp: string): EgressSandbox | undefined;
  /** Ranges no sandbox reaches (the operator's list). */
  denied: string[];
  /** The slot range: with the host's own addresses, never a destination whatever the lists say. */
  slotCidr: string;
  /** Static answers before DNS. */
  hosts: Record<string, string[]>;
  rewriter?: EgressRewriter;
  /** How a sandbox's own egressProxy is reached: whether an address may be, extra TLS roots. */
  userProxy?: { permitted(ip: string): boolean; ca?: string };
}

const SNIFF_LIMIT = 16_384;
const SNIFF_TIMEOUT_MS = 10_000;
const IDLE_TIMEOUT_MS = 10 * 60_000;

/**
 * The host side of domain rules. A slot redirects outbound TCP 80/443 that its IP rules would
 * drop to these two listeners; the proxy reads the HTTP Host or TLS SNI and lets the connection
 * through only if that name is allowed. It connects to the name as it resolves it here, never
 * to the address the sandbox dialled: a sandbox cannot reach a denied address by claiming an
 * allowed name. Nor does it ever connect to the host itself (its addresses, loopback, the slot
 * range): from here such a connection would come from the host, past the firewall that keeps
 * slots off the host's own services.
 */
export class EgressProxy {
  private readonly servers: Server[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly host: HostAddresses;

  constructor(private readonly o: EgressProxyOptions) {
    this.host = new HostAddresses([o.slotCidr]);
  }

  async listen(): Promise<{ http: number; tls: number }> {
    const http = await this.listenOne(false);
    const tls = await this.listenOne(true);
    return { http, tls };
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await Promise.all(this.servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
  }

  private listenOne(tls: boolean): Promise<number> {
    const server = createServer((socket) => this.accept(socket, tls));
    server.on("error", (err) => this.o.log.error({ err }, "egress proxy listener failed"));
    this.servers.push(server);
    return new Promise((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "0.0.0.0", () => {
        const addr = server.address();
        resolve(typeof addr === "object" && addr ? addr.port : 0);
      });
    });
  }

  private accept(socket: Socket, tls: boolean): void {
    this.sockets.add(socket);
    socket.on("close", () => this.sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    const source = (socket.remoteAddress ?? "").replace(/^::ffff:/, "");
    const sandbox = this.o.sandboxFor(source);
    // The listener takes every host address; a sandbox's router sends it here only at its own
    // slot link's host end (the host's firewall holds the rest back too).
    const local = (socket.localAddress ?? "").replace(/^::ffff:/, "");
    if (!sandbox || local !== sandbox.hostIp) {
      socket.destroy();
      return;
    }
    let head = Buffer.alloc(0);
    socket.setTimeout(SNIFF_TIMEOUT_MS, () => socket.destroy());
    const onData = (d: Buffer) => {
      head = Buffer.concat([head, d]);
      const name = tls ? parseClientHelloSni(head) : parseHttpHost(head, SNIFF_LIMIT);
      if (name === undefined && head.length <= SNIFF_LIMIT) return;
      socket.off("data", onData);
      socket.pause();
      if (!name) {
        this.refuse(socket, sandbox, tls, "no server name");
        return;
      }
      this.route(socket, head, tls, name, sandbox).catch((err) => {
        this.o.log.warn({ err, sandboxID: sandbox.id, host: name }, "egress connection failed");
        socket.destroy();
      });
    };
    socket.on("data", onData);
  }

  private refuse(socket: Socket, sandbox: EgressSandbox, tls: boolean, why: string, host?: string): void {
    this.o.log.info({ sandboxID: sandbox.id, host, tls }, `egress refused: ${why}`);
    if (!tls) socket.end(`HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n`);
    else socket.destroy();
  }

  private async resolve(host: string): Promise<string[]> {
    const fixed = this.o.hosts[host.toLowerCase()];
    if (fixed) return fixed;
    try {
      return (await lookup(host, { all: true, family: 4 })).map((a) => a.address);
    } catch {
      return [];
    }
  }

  private async route(socket: Socket, head: Buffer, tls: boolean, host: string, sandbox: EgressSandbox) {
    const { policy } = sandbox;
    const byName = policy.allowDomains.some((p) => domainMatches(p, host));
    const ipAllowed = (ip: string) => inCidrs(ip, policy.allowCidrs) || !inCidrs(ip, policy.denyCidrs);
    const addresses = (await this.resolve(host)).filter(
      (ip) => !this.host.has(ip) && !inCidrs(ip, this.o.denied) && (byName || ipAllowed(ip)),
    );
    if (addresses.length === 0) {
      this.refuse(socket, sandbox, tls, byName ? "name resolves to no reachable address" : "not allowed", host);
      return;
    }
    if (this.o.rewriter && rulesFor(sandbox.spec?.rules, host)) {
      socket.setTimeout(IDLE_TIMEOUT_MS);
      this.o.rewriter.handle({ socket, head, tls, host, sandbox, addresses });
      return;
    }
    const proxy = sandbox.spec?.egressProxy;
    if (proxy) {
      // Through the user's proxy by name (the proxy resolves it), once the checks above passed.
      const up = await dialThroughProxy(
        proxy,
        { host, port: tls ? 443 : 80 },
        this.o.userProxy ?? { permitted: () => false },
      );
      this.sockets.add(up.socket);
      up.socket.on("close", () => this.sockets.delete(up.socket));
      up.socket.write(head);
      if (up.head.length > 0) socket.write(up.head);
      this.pipe(socket, up.socket);
      return;
    }
    const upstream = connect({ host: addresses[0] as string, port: tls ? 443 : 80 });
    this.sockets.add(upstream);
    upstream.on("close", () => {
      this.sockets.delete(upstream);
      socket.destroy();
    });
    upstream.on("error", () => upstream.destroy());
    socket.on("close", () => upstream.destroy());
    socket.setTimeout(IDLE_TIMEOUT_MS, () => socket.destroy());
    upstream.once("connect", () => {
      upstream.write(head);
      socket.pipe(upstream);
      upstream.pipe(socket);
      socket.resume();
    });
  }

  private pipe(socket: Socket, upstream: Socket): void {
    if (socket.destroyed) {
      upstream.destroy();
      return;
    }
    upstream.on("close", () => socket.destroy());
    upstream.on("error", () => upstream.destroy());
    socket.on("close", () => upstream.destroy());
    socket.setTimeout(IDLE_TIMEOUT_MS, () => socket.destroy());
    socket.pipe(upstream);
    upstream.pipe(socket);
    socket.resume();
    upstream.resume();
  }
}
