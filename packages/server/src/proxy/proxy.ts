import { Agent, type IncomingMessage, request, type ServerResponse } from "node:http";
import { connect as netConnect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { Logger } from "pino";
import { type ProxyTarget, upstreamHeaders } from "./target.js";

export type RouteResult = { ip: string } | { status: number; message: string };

export interface RouteLookup {
  /** Waits out captures, auto-resumes when allowed; an error status otherwise. */
  resolve(id: string, port: number): Promise<RouteResult>;
}

function sendError(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ code: status, message });
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Forwards HTTP (streaming both ways, no buffering) and upgraded connections (WebSocket)
 * to a port inside a sandbox, through its slot address.
 */
export class SandboxProxy {
  // Kept-alive connections make a commands.run round trip cheaper. They are per sandbox:
  // slot addresses are reused, and a socket pooled for a dead sandbox must never carry a
  // request to its successor. A checkpoint drops them (runsc --net-disconnect-ok); a
  // bodiless request that fails on a reused socket is retried once.
  private readonly agents = new Map<string, { ip: string; agent: Agent }>();
  /** Open upstream sockets per sandbox, cut before a capture. */
  private readonly active = new Map<string, Set<{ destroy(): void }>>();

  constructor(
    private readonly routes: RouteLookup,
    private readonly log: Logger,
  ) {}

  private async lookup(t: ProxyTarget): Promise<RouteResult> {
    if (!t.sandboxId || !Number.isInteger(t.port)) {
      return { status: 400, message: "proxy request needs a sandbox ID and a port" };
    }
    return this.routes.resolve(t.sandboxId, t.port);
  }

  private track(id: string, s: { destroy(): void; once(ev: "close", fn: () => void): unknown }): void {
    let set = this.active.get(id);
    if (!set) {
      set = new Set();
      this.active.set(id, set);
    }
    set.add(s);
    s.once("close", () => set.delete(s));
  }

  handle(req: IncomingMessage, res: ServerResponse, t: ProxyTarget): void {
    this.lookup(t).then(
      (found) => {
        if (!("ip" in found)) {
          req.resume();
          sendError(res, found.status, found.message);
          return;
        }
        this.forward(req, res, t, found.ip, true);
      },
      (err: Error) => {
        req.resume();
        sendError(res, 502, err.message);
      },
    );
  }

  private forward(req: IncomingMessage, res: ServerResponse, t: ProxyTarget, ip: string, mayRetry: boolean): void {
    const up = request({
      host: ip,
      port: t.port,
      method: req.method,
      path: t.path,
      headers: upstreamHeaders(req, false),
      agent: this.agentFor(t.sandboxId, ip),
    });
    this.track(t.sandboxId, up);
    let retried = false;
    up.on("response", (ur) => {
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(ur.headers)) {
        if (v === undefined || k === "connection" || k === "keep-alive" || k === "transfer-encoding") continue;
        headers[k] = v;
      }
      res.writeHead(ur.statusCode ?? 502, headers);
      res.flushHeaders();
      ur.pipe(res);
      ur.on("error", () => res.destroy());
    });
    up.on("error", (err: NodeJS.ErrnoException) => {
      // A kept-alive socket the sandbox dropped: retry once on a fresh one if nothing was sent yet.
      const bodiless = req.method === "GET" || req.method === "HEAD" || req.headers["content-length"] === "0";
      if (mayRetry && up.reusedSocket && err.code === "ECONNRESET" && bodiless) {
        retried = true;
        this.forward(req, res, t, ip, false);
        return;
      }
      const msg =
        err.code === "ECONNREFUSED"
          ? `nothing is listening on port ${t.port} in sandbox '${t.sandboxId}'`
          : `sandbox '${t.sandboxId}' port ${t.port} unreachable: ${err.message}`;
      sendError(res, 502, msg);
    });
    // The client went away: stop the upstream request (envd keeps the process itself running).
    res.on("close", () => {
      if (!res.writableFinished && !retried) up.destroy();
    });
    req.pipe(up);
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, t: ProxyTarget): void {
    this.lookup(t).then(
      (found) => this.upgrade(req, socket, head, t, found),
      () => socket.destroy(),
    );
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, t: ProxyTarget, found: RouteResult): void {
    if (!("ip" in found)) {
      const body = JSON.stringify({ code: found.status, message: found.message });
      socket.end(
        `HTTP/1.1 ${found.status} Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
      return;
    }
    const upstream: Socket = netConnect({ host: found.ip, port: t.port });
    this.track(t.sandboxId, upstream);
    upstream.on("connect", () => {
      const headers = upstreamHeaders(req, true);
      let head_ = `${req.method} ${t.path} HTTP/1.1\r\n`;
      for (const [k, v] of Object.entries(headers)) {
        for (const one of Array.isArray(v) ? v : [v]) head_ += `${k}: ${one}\r\n`;
      }
      upstream.write(`${head_}\r\n`);
      if (head.length) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    const close = () => {
      upstream.destroy();
      socket.destroy();
    };
    upstream.on("error", (err) => {
      this.log.debug({ err, sandboxID: t.sandboxId }, "upgrade upstream error");
      if (!upstream.readyState || upstream.connecting) {
        socket.end("HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
      }
      close();
    });
    socket.on("error", close);
    socket.on("close", close);
    upstream.on("close", close);
  }

  private agentFor(id: string, ip: string): Agent {
    const cur = this.agents.get(id);
    if (cur && cur.ip === ip) return cur.agent;
    cur?.agent.destroy();
    const agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 10_000 });
    this.agents.set(id, { ip, agent });
    return agent;
  }

  /** Cuts every connection into a sandbox that stops or is about to be captured. */
  forget(id: string): void {
    this.agents.get(id)?.agent.destroy();
    this.agents.delete(id);
    const set = this.active.get(id);
    if (set) for (const s of [...set]) s.destroy();
    this.active.delete(id);
  }

  close(): void {
    for (const { agent } of this.agents.values()) agent.destroy();
    this.agents.clear();
  }
}
