import { Agent, type IncomingMessage, request, type ServerResponse } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { connect as netConnect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import { AtCapacityError, InvalidRequestError, NotFoundError, PausedError } from "@aenv/edge/errors";
import { errorBody } from "@aenv/edge/http-errors";
import { DEFAULT_HTTP_LIMITS, type HttpLimits, tunnelIdle } from "@aenv/edge/http-limits";
import { type ProxyTarget, SANDBOX_NOT_FOUND, targetProblem, trafficErrorBody } from "@aenv/edge/proxy-target";
import { endWithError } from "@aenv/edge/socket-error";
import { ENVD_PORT, TRAFFIC_TOKEN_HEADER } from "@aenv/protocol";
import type { Logger } from "pino";
import { type EnvdTokens, envdAuth } from "./envd-auth.js";
import { isolateResponse, sharedOriginProblem, sharesServerOrigin } from "./origin-isolation.js";
import { trafficTokenProblem } from "./traffic-token.js";
import { type UpstreamOptions, upstreamHeaders } from "./upstream-headers.js";

/** Why a request could not be routed, as its answer. */
export interface LookupFailure {
  status: number;
  message: string;
  sandboxId?: string;
  /** Seconds, for the Retry-After header. */
  retryAfter?: number;
}

/** Where to send a request, with the credential for it (undefined: the client's headers as they are). */
export type RouteResult = { ip: string; accessToken?: string | null } | LookupFailure;

export interface RouteLookup {
  /** The slot address to send to: waits out captures, auto-resumes when allowed; throws otherwise. */
  route(id: string): Promise<{ ip: string }>;
  /** A known sandbox's ingress settings (checked before anything, a resume included, happens). */
  access(id: string): SandboxAccess | undefined;
}

export interface SandboxAccess {
  /** Set with allowPublicTraffic: false; required on every port but envd's. */
  trafficToken?: string;
  maskRequestHost?: string;
  /** Ports that serve HTTPS: reached over TLS, their certificates not verified (E2B's httpsPorts). */
  httpsPorts?: number[];
  /** Its envd tokens: what clients present, what envd holds. */
  envdTokens?: EnvdTokens;
}

type Routed = Extract<RouteResult, { ip: string }>;

/** Why a request may not reach this port of the sandbox (403), or undefined. */
export function accessProblem(req: IncomingMessage, t: ProxyTarget, a: SandboxAccess | undefined): string | undefined {
  const got = req.headers[TRAFFIC_TOKEN_HEADER];
  return trafficTokenProblem(t.sandboxId, t.port, Array.isArray(got) ? got[0] : got, a?.trafficToken);
}

/**
 * What a failed lookup answers. E2B's proxy says 502 for a sandbox it cannot reach (the SDK
 * reads it as "not found") and 410 for a paused one on an application port.
 */
function lookupFailure(err: unknown, t: ProxyTarget): LookupFailure {
  const { code, message } = errorBody(err);
  // An auto-resume on a full node: retry later, as for a create.
  if (err instanceof AtCapacityError) return { status: 503, message, retryAfter: err.retryAfterS };
  if (err instanceof PausedError) return { status: t.port === ENVD_PORT ? 502 : 410, message };
  if (err instanceof NotFoundError) return { status: 502, message: SANDBOX_NOT_FOUND, sandboxId: t.sandboxId };
  return { status: code >= 500 || code === 409 ? 502 : code, message };
}

/** A JSON error answer, unless the response has begun (then the connection is cut). */
export function sendError(
  res: ServerResponse,
  status: number,
  message: string,
  sandboxId?: string,
  retryAfter?: number,
): void {
  if (res.headersSent || res.destroyed) {
    res.destroy();
    return;
  }
  const body = JSON.stringify(trafficErrorBody(status, message, sandboxId));
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
    ...(retryAfter !== undefined ? { "retry-after": String(retryAfter) } : {}),
  });
  res.end(body);
}

/** Response headers a sandbox sent, as Node will accept them back; undefined when they are not. */
function responseHead(ur: IncomingMessage): { status: number; headers: Record<string, string | string[]> } | undefined {
  const status = ur.statusCode ?? 0;
  // Code inside the sandbox controls this: a status Node refuses to write is a bad gateway.
  if (!Number.isInteger(status) || status < 100 || status > 999) return undefined;
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(ur.headers)) {
    if (v === undefined || k === "connection" || k === "keep-alive" || k === "transfer-encoding") continue;
    headers[k] = v;
  }
  return { status, headers };
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
  /** The same for httpsPorts (TLS sessions are per sandbox too). */
  private readonly tlsAgents = new Map<string, { ip: string; agent: HttpsAgent }>();
  /** Open upstream sockets per sandbox, cut before a capture. */
  private readonly active = new Map<string, Set<{ destroy(): void }>>();

  constructor(
    private readonly routes: RouteLookup,
    private readonly log: Logger,
    private readonly isPlatformCredential: (authorization: string) => boolean = () => false,
    private readonly limits: Pick<HttpLimits, "tunnelIdleTimeoutMs"> = DEFAULT_HTTP_LIMITS,
  ) {}

  private async lookup(req: IncomingMessage, t: ProxyTarget): Promise<RouteResult> {
    try {
      const problem = targetProblem(t);
      if (problem) throw new InvalidRequestError(problem);
      const shared = sharedOriginProblem(req, t);
      if (shared) return { status: 403, message: shared };
      // Before routing: an unauthenticated request must not even resume a private sandbox.
      const known = this.routes.access(t.sandboxId);
      const denied = accessProblem(req, t, known);
      if (denied) return { status: 403, message: denied };
      let auth = known?.envdTokens ? envdAuth(req, t, known.envdTokens) : undefined;
      if (auth && "status" in auth) return auth;
      const { ip } = await this.routes.route(t.sandboxId);
      // A sandbox this node learnt of while routing (resumed from the repository) is checked now.
      const tokens = auth ? undefined : this.routes.access(t.sandboxId)?.envdTokens;
      if (tokens) auth = envdAuth(req, t, tokens);
      if (auth && "status" in auth) return auth;
      return auth ? { ip, accessToken: auth.accessToken } : { ip };
    } catch (err) {
      return lookupFailure(err, t);
    }
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

  /** Never throws and never rejects: every failure is a logged error answer to this request. */
  handle(req: IncomingMessage, res: ServerResponse, t: ProxyTarget): void {
    void this.handleAsync(req, res, t);
  }

  private async handleAsync(req: IncomingMessage, res: ServerResponse, t: ProxyTarget): Promise<void> {
    try {
      const found = await this.lookup(req, t);
      if (!("ip" in found)) {
        req.resume();
        sendError(res, found.status, found.message, found.sandboxId, found.retryAfter);
        return;
      }
      this.forward(req, res, t, found, true);
    } catch (err) {
      this.log.error({ err, sandboxID: t.sandboxId, port: t.port }, "proxy request failed");
      req.resume();
      try {
        sendError(res, 502, `proxy error: ${(err as Error).message}`);
      } catch {
        res.destroy();
      }
    }
  }

  private forward(req: IncomingMessage, res: ServerResponse, t: ProxyTarget, to: Routed, mayRetry: boolean): void {
    const { ip } = to;
    const opts = {
      host: ip,
      port: t.port,
      method: req.method,
      path: t.path,
      headers: upstreamHeaders(req, false, this.upstreamOptions(t, to)),
    };
    const up = this.servesTls(t)
      ? // The sandbox's own certificate (self-signed, most often): not verified, as on E2B.
        httpsRequest({ ...opts, agent: this.tlsAgentFor(t.sandboxId, ip), rejectUnauthorized: false })
      : request({ ...opts, agent: this.agentFor(t.sandboxId, ip) });
    this.track(t.sandboxId, up);
    let retried = false;
    up.on("response", (ur) => {
      ur.on("error", () => res.destroy());
      const head = responseHead(ur);
      if (!head) {
        ur.destroy();
        sendError(
          res,
          502,
          `sandbox '${t.sandboxId}' port ${t.port} answered an invalid HTTP status (${ur.statusCode})`,
        );
        return;
      }
      try {
        res.writeHead(head.status, isolateResponse(t, head.headers));
      } catch (err) {
        // A header Node will not write back (the sandbox chose it): nothing was sent yet.
        ur.destroy();
        res.removeHeader("content-length");
        sendError(
          res,
          502,
          `sandbox '${t.sandboxId}' port ${t.port} answered an invalid response: ${(err as Error).message}`,
        );
        return;
      }
      res.flushHeaders();
      ur.pipe(res);
    });
    up.on("error", (err: NodeJS.ErrnoException) => {
      // A kept-alive socket the sandbox dropped: retry once on a fresh one if nothing was sent yet.
      const bodiless = req.method === "GET" || req.method === "HEAD" || req.headers["content-length"] === "0";
      if (mayRetry && up.reusedSocket && err.code === "ECONNRESET" && bodiless) {
        retried = true;
        this.forward(req, res, t, to, false);
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

  /** Never throws and never rejects, like handle(). */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, t: ProxyTarget): void {
    // A client reset before the lookup ends must not be an unhandled 'error' event.
    socket.on("error", () => socket.destroy());
    void this.upgradeAsync(req, socket, head, t);
  }

  private async upgradeAsync(req: IncomingMessage, socket: Duplex, head: Buffer, t: ProxyTarget): Promise<void> {
    try {
      const found = await this.lookup(req, t);
      if (!("ip" in found)) {
        endWithError(socket, found.status, found.message);
        return;
      }
      this.upgrade(req, socket, head, t, found);
    } catch (err) {
      this.log.error({ err, sandboxID: t.sandboxId, port: t.port }, "proxy upgrade failed");
      endWithError(socket, 502, `proxy error: ${(err as Error).message}`);
      socket.destroy();
    }
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, t: ProxyTarget, to: Routed): void {
    const tls = this.servesTls(t);
    const upstream: Socket = tls
      ? tlsConnect({ host: to.ip, port: t.port, rejectUnauthorized: false, ALPNProtocols: ["http/1.1"] })
      : netConnect({ host: to.ip, port: t.port });
    this.track(t.sandboxId, upstream);
    let connected = false;
    upstream.on(tls ? "secureConnect" : "connect", () => {
      connected = true;
      const headers = upstreamHeaders(req, true, this.upstreamOptions(t, to));
      let head_ = `${req.method} ${t.path} HTTP/1.1\r\n`;
      for (const [k, v] of Object.entries(headers)) {
        for (const one of Array.isArray(v) ? v : [v]) head_ += `${k}: ${one}\r\n`;
      }
      upstream.write(`${head_}\r\n`);
      if (head.length) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    // A tunnel nobody uses any more (no byte either way) does not hold the slot forever.
    tunnelIdle(this.limits, socket, () => {
      this.log.debug({ sandboxID: t.sandboxId }, "idle tunnel closed");
      upstream.destroy();
      socket.destroy();
    });
    let answered = false;
    const close = () => {
      upstream.destroy();
      // An error answer already written ends the socket itself once flushed.
      if (!answered) socket.destroy();
    };
    upstream.on("error", (err) => {
      this.log.debug({ err, sandboxID: t.sandboxId }, "upgrade upstream error");
      if (!connected) {
        answered = true;
        endWithError(socket, 502, `sandbox '${t.sandboxId}' port ${t.port} unreachable: ${err.message}`);
      }
      close();
    });
    socket.on("error", close);
    socket.on("close", close);
    upstream.on("close", close);
  }

  private upstreamOptions(t: ProxyTarget, to: Routed): UpstreamOptions {
    const mask = this.routes.access(t.sandboxId)?.maskRequestHost;
    return {
      isPlatformCredential: this.isPlatformCredential,
      // The server's own origin's cookies are not the sandbox's (origin-isolation.ts).
      dropCookies: sharesServerOrigin(t),
      ...(to.accessToken !== undefined ? { accessToken: to.accessToken } : {}),
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's literal placeholder
      ...(mask ? { host: mask.replaceAll("${PORT}", String(t.port)) } : {}),
    };
  }

  private servesTls(t: ProxyTarget): boolean {
    return this.routes.access(t.sandboxId)?.httpsPorts?.includes(t.port) ?? false;
  }

  private tlsAgentFor(id: string, ip: string): HttpsAgent {
    const cur = this.tlsAgents.get(id);
    if (cur && cur.ip === ip) return cur.agent;
    cur?.agent.destroy();
    const agent = new HttpsAgent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 10_000 });
    this.tlsAgents.set(id, { ip, agent });
    return agent;
  }

  private agentFor(id: string, ip: string): Agent {
    const cur = this.agents.get(id);
    if (cur && cur.ip === ip) return cur.agent;
    cur?.agent.destroy();
    const agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 10_000 });
    this.agents.set(id, { ip, agent });
    return agent;
  }

  /** Whether a client request or tunnel into the sandbox is open now. */
  hasOpenConnections(id: string): boolean {
    return (this.active.get(id)?.size ?? 0) > 0;
  }

  /** Cuts every connection into a sandbox that stops or is about to be captured. */
  forget(id: string): void {
    this.agents.get(id)?.agent.destroy();
    this.agents.delete(id);
    this.tlsAgents.get(id)?.agent.destroy();
    this.tlsAgents.delete(id);
    const set = this.active.get(id);
    if (set) for (const s of [...set]) s.destroy();
    this.active.delete(id);
  }

  close(): void {
    for (const { agent } of [...this.agents.values(), ...this.tlsAgents.values()]) agent.destroy();
    this.agents.clear();
    this.tlsAgents.clear();
  }
}
