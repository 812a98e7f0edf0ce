import { Agent, type IncomingMessage, request, type ServerResponse } from "node:http";
import { connect } from "node:net";
import type { Duplex } from "node:stream";
import { errorBody, errorBodyOf, retryAfterOf, statusOf } from "@aenv/edge/http-errors";
import { type HttpLimits, tunnelIdle } from "@aenv/edge/http-limits";
import { endWithError } from "@aenv/edge/socket-error";
import { signedForNode } from "./node-proof.js";

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
]);

const agent = new Agent({ keepAlive: true, maxSockets: 1024, keepAliveMsecs: 10_000 });

export function sendJson(res: ServerResponse, status: number, body: unknown, extra: Record<string, string> = {}): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...extra });
  res.end(text);
}

/** An E2B error answer ({code, message}). */
export function sendError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, errorBodyOf(status, message));
}

/** A domain error as a node would answer it: its status, E2B body and Retry-After. */
export function sendErrorOf(res: ServerResponse, err: Error): void {
  const retry = retryAfterOf(err);
  sendJson(res, statusOf(err) ?? 500, errorBody(err), retry !== undefined ? { "retry-after": String(retry) } : {});
}

function headersFor(req: IncomingMessage, keepUpgrade: boolean): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue;
    if (HOP_BY_HOP.has(k) && !(keepUpgrade && (k === "connection" || k === "upgrade"))) continue;
    out[k] = v;
  }
  if (req.headers["transfer-encoding"] && !keepUpgrade) out["transfer-encoding"] = "chunked";
  const fwd = req.socket.remoteAddress;
  if (fwd) out["x-forwarded-for"] = fwd;
  return signedForNode(req, out);
}

/**
 * Sends a request on to a node as it came (method, path, headers, body streamed), and the
 * node's answer back as it comes: envd streams, file transfers and long polls pass through
 * without buffering. `body`, when given, replaces the request's (already read) body.
 */
export function forward(
  req: IncomingMessage,
  res: ServerResponse,
  nodeUrl: string,
  opts: {
    body?: Buffer;
    path?: string;
    /**
     * Called instead of answering 502 when the node cannot be connected to at all (it died
     * before its heartbeat expired): nothing of the request was consumed, so the caller can
     * send it elsewhere.
     */
    onConnectError?: (err: Error) => void;
  } = {},
): void {
  const u = new URL(nodeUrl);
  const headers = headersFor(req, false);
  if (opts.body) {
    delete headers["transfer-encoding"];
    headers["content-length"] = String(opts.body.length);
  }
  const up = request({
    host: u.hostname,
    port: u.port,
    method: req.method,
    path: opts.path ?? req.url,
    headers,
    agent,
  });
  up.on("response", (ur) => {
    const out: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(ur.headers)) {
      if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
    }
    try {
      res.writeHead(ur.statusCode ?? 502, out);
    } catch {
      ur.destroy();
      sendError(res, 502, "node answered an invalid response");
      return;
    }
    res.flushHeaders();
    ur.pipe(res);
    ur.on("error", () => res.destroy());
  });
  let connected = false;
  up.on("error", (err) => {
    if (!connected && opts.onConnectError) return opts.onConnectError(err);
    sendError(res, 502, `node ${u.host} unreachable: ${err.message}`);
  });
  res.on("close", () => {
    if (!res.writableFinished) up.destroy();
  });
  // The body flows only once the node is connected, so a refused connection leaves it unread.
  const send = () => {
    connected = true;
    if (opts.body) up.end(opts.body);
    else req.pipe(up);
  };
  up.on("socket", (sock) => {
    if (sock.connecting) sock.once("connect", send);
    else send();
  });
}

/** Calls a node and reads its whole (small, JSON) answer: creates, lists, node info. */
export function call(
  nodeUrl: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: Buffer,
  timeoutMs = 10 * 60_000,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  const u = new URL(nodeUrl);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        method,
        path,
        headers: { ...headers, ...(body ? { "content-length": String(body.length) } : {}) },
        agent,
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on("error", reject);
      },
    );
    req.on("timeout", () => req.destroy(new Error(`node ${u.host} did not answer within ${timeoutMs} ms`)));
    req.on("error", reject);
    req.end(body);
  });
}

/** Tunnels an upgrade (WebSocket) to a node at TCP level. */
export function forwardUpgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  nodeUrl: string,
  limits: Pick<HttpLimits, "tunnelIdleTimeoutMs">,
): void {
  const u = new URL(nodeUrl);
  const upstream = connect({ host: u.hostname, port: Number(u.port) });
  let connected = false;
  upstream.on("connect", () => {
    connected = true;
    let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
    for (const [k, v] of Object.entries(headersFor(req, true))) {
      for (const one of Array.isArray(v) ? v : [v]) text += `${k}: ${one}\r\n`;
    }
    upstream.write(`${text}\r\n`);
    if (head.length) upstream.write(head);
    upstream.pipe(socket);
    socket.pipe(upstream);
  });
  const close = () => {
    upstream.destroy();
    socket.destroy();
  };
  tunnelIdle(limits, socket, close);
  upstream.on("error", (err) => {
    if (!connected && !socket.destroyed) {
      endWithError(socket, 502, `node ${u.host} unreachable: ${err.message}`);
      upstream.destroy();
      return;
    }
    close();
  });
  socket.on("error", close);
  socket.on("close", close);
  upstream.on("close", () => {
    if (connected) close();
  });
}
