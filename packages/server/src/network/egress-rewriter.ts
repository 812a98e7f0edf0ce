import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type RequestOptions,
  type ServerResponse,
} from "node:http";
import { request as httpsRequest } from "node:https";
import { connect as netConnect, type Socket } from "node:net";
import { Duplex, PassThrough } from "node:stream";
import { createSecureContext, rootCertificates, TLSSocket, connect as tlsConnect } from "node:tls";
import type { Logger } from "pino";
import type { EgressCa } from "./egress-ca.js";
import type { EgressRewriter, EgressSandbox } from "./egress-proxy.js";
import { HEADER_VALUE, rulesFor } from "./policy.js";

/**
 * A secret's value for a request to `host` (the API's `${e2b.secrets.NAME}` placeholders), or
 * why it may not be sent there.
 */
export type SecretValue = (
  name: string,
  host: string,
  owner: string | undefined,
) => { value: string } | { refused: "missing" | "unbound" | "host" | "invalid"; message: string };

interface Conn {
  host: string;
  sandbox: EgressSandbox;
  addresses: string[];
  tls: boolean;
}

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
]);
const SECRET = /\$\{e2b\.secrets\.([A-Za-z0-9_.-]{1,128})\}/g;

/** A request the rules cannot be applied to: answered with `status`, never sent on. */
class RuleError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Applies a sandbox's per-domain transform rules: terminates its HTTP(S) connection (TLS with a
 * certificate from this node's egress CA, which such sandboxes trust), injects the rule's
 * headers with secrets resolved at request time, and forwards each request to the name's own
 * address over TLS verified against the system's roots. The secret values exist only here,
 * never in the sandbox.
 */
export class HeaderRewriter implements EgressRewriter {
  private readonly server = createServer({ requestTimeout: 0 });
  private readonly conns = new WeakMap<object, Conn>();
  private readonly upstreamCa: string[] | undefined;

  constructor(
    private readonly o: {
      ca: EgressCa;
      secret: SecretValue;
      log: Logger;
      extraUpstreamCa?: string;
      /** A connection to host:port through the sandbox's own egressProxy; undefined: it has none. */
      via?: (sandbox: EgressSandbox, host: string, port: number) => Promise<Socket> | undefined;
    },
  ) {
    this.upstreamCa = o.extraUpstreamCa ? [...rootCertificates, o.extraUpstreamCa] : undefined;
    this.server.headersTimeout = 60_000;
    this.server.keepAliveTimeout = 5_000;
    this.server.on("request", (req, res) => this.onRequest(req, res));
    this.server.on("upgrade", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      this.onUpgrade(req, socket, head),
    );
    this.server.on("clientError", (_err, socket) => socket.destroy());
  }

  handle(o: { socket: Socket; head: Buffer; tls: boolean; host: string; sandbox: EgressSandbox; addresses: string[] }) {
    const conn: Conn = { host: o.host.toLowerCase(), sandbox: o.sandbox, addresses: o.addresses, tls: o.tls };
    // A plain stream around the socket: the bytes already read go first, and neither TLS nor the
    // HTTP parser may bypass them by reading the socket's handle directly.
    const inbound = new PassThrough();
    inbound.write(o.head);
    o.socket.pipe(inbound);
    o.socket.resume();
    const stream = Duplex.from({ readable: inbound, writable: o.socket });
    stream.on("error", () => o.socket.destroy());
    o.socket.on("close", () => stream.destroy());
    if (!o.tls) {
      this.conns.set(stream, conn);
      this.server.emit("connection", stream);
      return;
    }
    this.o.ca.leafFor(conn.host).then(
      ({ key, cert }) => {
        const t = new TLSSocket(stream, {
          isServer: true,
          secureContext: createSecureContext({ key, cert }),
          ALPNProtocols: ["http/1.1"],
        });
        t.on("error", () => t.destroy());
        this.conns.set(t, conn);
        this.server.emit("connection", t);
      },
      (err) => {
        this.o.log.error({ err, host: conn.host }, "egress certificate not signed");
        o.socket.destroy();
      },
    );
  }

  /**
   * The headers the matching rules add, secrets filled in. Throws RuleError for a secret that
   * is missing, not bound to this host (403: the rules were set before the secret was made or
   * bound), or not a valid header value, and for any header node:http would refuse to send.
   */
  private injected(conn: Conn): Array<[string, string]> {
    const out: Array<[string, string]> = [];
    for (const rule of rulesFor(conn.sandbox.spec?.rules, conn.host) ?? []) {
      for (const [k, v] of Object.entries(rule.transform?.headers ?? {})) {
        const value = v.replace(SECRET, (_m, name: string) => {
          const s = this.o.secret(name, conn.host, conn.sandbox.owner);
          if ("value" in s) return s.value;
          this.o.log.warn(
            { sandboxID: conn.sandbox.id, host: conn.host, secret: name, why: s.refused },
            "egress secret refused",
          );
          throw new RuleError(s.refused === "host" || s.refused === "unbound" ? 403 : 502, s.message);
        });
        if (!HEADER_VALUE.test(value) || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k)) {
          throw new RuleError(502, `the network rule's header '${k}' is not a valid header`);
        }
        out.push([k.toLowerCase(), value]);
      }
    }
    return out;
  }

  /** Request headers for upstream; undefined (answered) when the request is refused. */
  private upstreamHeaders(
    req: IncomingMessage,
    conn: Conn,
    res: ServerResponse | Socket,
  ): OutgoingHttpHeaders | undefined {
    const fail = (status: number, msg: string) => {
      if ("writeHead" in res) {
        res.writeHead(status, { "content-type": "text/plain", connection: "close" });
        res.end(`${msg}\n`);
      } else {
        res.end(`HTTP/1.1 ${status} Refused\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
      }
      return undefined;
    };
    // The connection goes to the name the proxy checked: another Host on it is not that name.
    const host = (req.headers.host ?? conn.host).replace(/:\d+$/, "").toLowerCase();
    if (host !== conn.host) return fail(421, `this connection is for ${conn.host}, not ${host}`);
    let inject: Array<[string, string]>;
    try {
      inject = this.injected(conn);
    } catch (err) {
      if (!(err instanceof RuleError)) throw err;
      return fail(err.status, err.message);
    }
    const headers: OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) headers[k] = v;
    for (const [k, v] of inject) headers[k] = v;
    return headers;
  }

  /** A handler's own failure ends its request; it never escapes as an uncaught exception. */
  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    try {
      this.forward(req, res);
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, "egress request refused");
      if (res.headersSent) res.destroy();
      else {
        res.writeHead(502, { "content-type": "text/plain", connection: "close" });
        res.end("egress proxy: request refused\n");
      }
    }
  }

  private forward(req: IncomingMessage, res: ServerResponse): void {
    const conn = this.conns.get(req.socket);
    if (!conn) {
      res.destroy();
      return;
    }
    const headers = this.upstreamHeaders(req, conn, res);
    if (!headers) return;
    const opts = {
      host: conn.addresses[0],
      port: conn.tls ? 443 : 80,
      method: req.method,
      path: req.url,
      headers,
      agent: false as const,
    };
    const tunnel = this.o.via?.(conn.sandbox, conn.host, conn.tls ? 443 : 80);
    const up = tunnel
      ? // Through the user's proxy: node:http takes the socket (TLS inside the tunnel) when it is open.
        // (No agent at all: node:http only calls createConnection without one.)
        httpRequest({
          ...opts,
          agent: undefined,
          createConnection: ((_o: unknown, done: (err: Error | null, s?: Socket) => void) => {
            tunnel.then(
              (raw) => {
                done(null, this.overTunnel(raw, conn));
                // The dial left it paused; node:http attaches its reader first (next tick).
                raw.resume();
              },
              (err: Error) => done(err),
            );
            return undefined;
          }) as unknown as RequestOptions["createConnection"],
        })
      : conn.tls
        ? httpsRequest({ ...opts, servername: conn.host, ...(this.upstreamCa ? { ca: this.upstreamCa } : {}) })
        : httpRequest(opts);
    up.on("response", (ur) => {
      const out: OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(ur.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
      try {
        res.writeHead(ur.statusCode ?? 502, out);
      } catch {
        ur.destroy();
        res.destroy();
        return;
      }
      ur.pipe(res);
      ur.on("error", () => res.destroy());
    });
    up.on("error", (err) => {
      this.o.log.info({ err: err.message, sandboxID: conn.sandbox.id, host: conn.host }, "egress upstream failed");
      if (res.headersSent) res.destroy();
      else {
        res.writeHead(502, { "content-type": "text/plain" });
        res.end(`egress proxy: ${conn.host}: ${err.message}\n`);
      }
    });
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  }

  private onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    try {
      this.upgrade(req, socket, head);
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, "egress upgrade refused");
      socket.end("HTTP/1.1 502 Refused\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
    }
  }

  /**
   * WebSocket and other upgrades: headers injected into the handshake, then bytes both ways.
   * The handshake is written by hand, so every line of it is checked here (the client's
   * headers were parsed by node:http; the injected ones by `injected`).
   */
  private upgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    const conn = this.conns.get(socket);
    if (!conn) {
      socket.destroy();
      return;
    }
    const headers = this.upstreamHeaders(req, conn, socket);
    if (!headers) return;
    const lines = [`${req.method} ${req.url} HTTP/1.1`, "connection: Upgrade", `upgrade: ${req.headers.upgrade}`];
    for (const [k, v] of Object.entries(headers)) {
      for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${one}`);
    }
    if (!lines.every((l) => HEADER_VALUE.test(l))) {
      socket.end("HTTP/1.1 502 Refused\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    const text = `${lines.join("\r\n")}\r\n`;
    const port = conn.tls ? 443 : 80;
    const host = conn.addresses[0] as string;
    const tunnel = this.o.via?.(conn.sandbox, conn.host, port);
    if (tunnel) {
      tunnel.then(
        (raw) => this.bridge(this.overTunnel(raw, conn), socket, text, head, conn.tls ? "secureConnect" : undefined),
        () => socket.destroy(),
      );
      return;
    }
    const up = conn.tls
      ? tlsConnect({ host, port, servername: conn.host, ...(this.upstreamCa ? { ca: this.upstreamCa } : {}) })
      : netConnect({ host, port });
    this.bridge(up, socket, text, head, conn.tls ? "secureConnect" : "connect");
  }

  /** A tunnel through the user's proxy as the upstream: TLS to the name inside it where the sandbox used TLS. */
  private overTunnel(raw: Socket, conn: Conn): Socket {
    if (!conn.tls) return raw;
    const t = tlsConnect({ socket: raw, servername: conn.host, ...(this.upstreamCa ? { ca: this.upstreamCa } : {}) });
    raw.on("close", () => t.destroy());
    raw.resume();
    return t;
  }

  /** Sends an upgrade's handshake upstream once `until` happened (undefined: it is open), then bytes both ways. */
  private bridge(up: Socket, socket: Socket, text: string, head: Buffer, until?: "connect" | "secureConnect"): void {
    const start = () => {
      // latin1, as node:http writes header values: one byte per character, never a line break.
      up.write(`${text}\r\n`, "latin1");
      if (head.length) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    };
    if (until) up.once(until, start);
    else start();
    up.on("error", () => socket.destroy());
    socket.on("error", () => up.destroy());
    socket.on("close", () => up.destroy());
    up.on("close", () => socket.destroy());
  }
}
