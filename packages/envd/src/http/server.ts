/** The envd HTTP server: plain routes plus the Connect services. */
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import {
  ENVD_FS_LAYER_APPLY_PATH,
  ENVD_FS_LAYER_CAPTURE_PATH,
  ENVD_HEAP_REDUCE_PATH,
  ENVD_QUIESCE_PATH,
  Filesystem,
  Process,
} from "@aenv/protocol";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { checkToken } from "../auth.js";
import type { Env } from "../env.js";
import { externalTcpConnections } from "../external-tcp.js";
import { handleDownload } from "../files/download.js";
import { handleUpload } from "../files/upload.js";
import { filesystemService } from "../filesystem/service.js";
import { reclaimSoon, reduceHeap, trimHeap } from "../heap-trim.js";
import { log } from "../log.js";
import { processService } from "../process/service.js";
import { handleApply, handleCapture } from "./fs-layer.js";
import { handleInit } from "./init.js";
import { collectMetrics } from "./metrics.js";
import { HttpError, sendEmpty, sendError, sendJson } from "./respond.js";

const RECLAIM_AFTER_BYTES = 1 << 20;

function tokenInterceptor(env: Env): Interceptor {
  return (next) => async (req) => {
    const r = checkToken(env.state.accessToken, req.header.get("x-access-token"));
    if (!r.ok) throw new ConnectError(r.message, Code.Unauthenticated);
    return next(req);
  };
}

function requireToken(env: Env, req: IncomingMessage): void {
  const h = req.headers["x-access-token"];
  const r = checkToken(env.state.accessToken, Array.isArray(h) ? h[0] : h);
  if (!r.ok) throw new HttpError(401, r.message);
}

export function createRequestHandler(env: Env): (req: IncomingMessage, res: ServerResponse) => void {
  const rpc = connectNodeAdapter({
    routes: (router) => {
      router.service(Process, processService(env));
      router.service(Filesystem, filesystemService(env));
    },
    interceptors: [tokenInterceptor(env)],
    fallback: (_req, res) => sendError(res as ServerResponse, 404, "not found"),
  });

  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://envd");
    const method = req.method ?? "GET";
    switch (url.pathname) {
      case "/health":
        if (method !== "GET" && method !== "HEAD") throw new HttpError(405, "method not allowed");
        return sendEmpty(res, 204);
      case "/init":
        if (method !== "POST") throw new HttpError(405, "method not allowed");
        return handleInit(env, req, res);
      case "/envs":
        if (method !== "GET") throw new HttpError(405, "method not allowed");
        requireToken(env, req);
        return sendJson(res, 200, env.state.envObject());
      case "/metrics":
        if (method !== "GET") throw new HttpError(405, "method not allowed");
        requireToken(env, req);
        return sendJson(res, 200, await collectMetrics());
      case ENVD_QUIESCE_PATH:
        // The host calls this right before a checkpoint: runsc resets the TCP connections
        // open at that time while it saves, and the reset wakes their epoll mid-save; the
        // restored event loop then spins or never hears its listening socket again. Closing
        // them here first keeps restores clean (the host opens no new one until it is done).
        if (method !== "POST") throw new HttpError(405, "method not allowed");
        requireToken(env, req);
        res.setHeader("Connection", "close");
        // Closed (fd and all) as soon as the answer is in the kernel, so the FIN the host waits
        // for comes after the close. Node's own Connection: close half-closes first and drops
        // the fd a loop turn later: a checkpoint the host started on that FIN could catch the
        // socket still open (see above).
        res.once("finish", () => req.socket.destroy());
        // Hibernation's save asks first: a sandbox in touch with the outside stays as it is.
        if (url.searchParams.get("unlessExternalTcp") === "1") {
          const n = await externalTcpConnections(req.socket.localPort ?? 0).catch(() => -1);
          if (n !== 0) {
            const why = n < 0 ? "TCP connections could not be listed" : `${n} TCP connection(s) to outside the sandbox`;
            return sendError(res, 409, `not idle: ${why}`);
          }
        }
        // Every other connection is closed before the answer, this one right after it: once
        // the host sees this connection end, nothing of envd's is left open.
        env.closeConnections?.(req.socket);
        // ?gc=1 before an image many sandboxes will start from (fork, a template's warm
        // image): V8 collects and gives back what it holds beyond its live objects, once,
        // instead of the same pending V8 work (incremental marking, the memory reducer)
        // replayed in every restored copy, and a smaller image for each of them.
        if (url.searchParams.get("gc") === "1") reduceHeap();
        // Freed heap (a file transfer's buffers) would be saved in the image: returned first.
        else trimHeap();
        return sendEmpty(res, 204);
      case ENVD_HEAP_REDUCE_PATH:
        if (method !== "POST") throw new HttpError(405, "method not allowed");
        requireToken(env, req);
        reduceHeap();
        return sendEmpty(res, 204);
      case ENVD_FS_LAYER_CAPTURE_PATH:
        if (method !== "POST") throw new HttpError(405, "method not allowed");
        requireToken(env, req);
        return handleCapture(res);
      case ENVD_FS_LAYER_APPLY_PATH:
        if (method !== "POST") throw new HttpError(405, "method not allowed");
        requireToken(env, req);
        return handleApply(req, res);
      case "/files": {
        // A transfer of a MiB or more leaves buffers behind: given back once transfers stop.
        const sock = req.socket;
        const [read0, written0] = [sock.bytesRead, sock.bytesWritten];
        res.once("finish", () => {
          if (sock.bytesRead - read0 + (sock.bytesWritten - written0) >= RECLAIM_AFTER_BYTES) reclaimSoon();
        });
        if (method === "GET") return handleDownload(env, req, res, url.searchParams);
        if (method === "POST") return handleUpload(env, req, res, url.searchParams);
        throw new HttpError(405, "method not allowed");
      }
      default:
        await rpc(req, res);
    }
  }

  return (req, res) => {
    const started = Date.now();
    res.on("finish", () => {
      log("debug", "request", { method: req.method, url: req.url, status: res.statusCode, ms: Date.now() - started });
    });
    route(req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : 500;
      if (status >= 500) log("error", "request failed", { method: req.method, url: req.url, err });
      if (res.headersSent) {
        res.destroy();
        return;
      }
      // don't keep a connection whose request body we did not read
      if (!req.complete) {
        res.setHeader("Connection", "close");
        req.resume();
      }
      sendError(res, status, err instanceof Error ? err.message : String(err));
    });
  };
}

export function createEnvdServer(env: Env): http.Server {
  const server = http.createServer(createRequestHandler(env));
  const sockets = new Set<Socket>();
  server.on("connection", (s: Socket) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  env.closeConnections = (except) => {
    for (const s of sockets) if (s !== except) s.destroy();
  };
  server.requestTimeout = 0; // uploads and streams may take long
  server.headersTimeout = 76_000;
  server.keepAliveTimeout = 75_000; // outlive the proxy's idle sockets
  server.on("clientError", (err, socket) => {
    log("debug", "client error", { err });
    if (socket.writable) socket.end("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    else socket.destroy();
  });
  return server;
}
