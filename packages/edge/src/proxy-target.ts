import type { IncomingMessage } from "node:http";
import {
  E2B_SANDBOX_ID_HEADER,
  E2B_SANDBOX_PORT_HEADER,
  ENVD_PORT,
  type ErrorBody,
  SANDBOX_ID_HEADER,
  TARGET_PORT_HEADER,
} from "@aenv/protocol";
import { errorBodyOf } from "./http-errors.js";

export interface ProxyTarget {
  sandboxId: string;
  port: number;
  /** Path and query to send upstream. */
  path: string;
  /** How the target was chosen, for logs and errors. */
  via: "header" | "host" | "path" | "signature";
}

/** E2B's proxy answer (502) for traffic to a sandbox it does not know or that is gone. */
export const SANDBOX_NOT_FOUND = "The sandbox was not found";

/** A traffic error's body, E2B's shape: "not found" also names the sandbox. */
export function trafficErrorBody(
  status: number,
  message: string,
  sandboxId?: string,
): ErrorBody & { sandboxId?: string } {
  return sandboxId ? { ...errorBodyOf(status, message), sandboxId } : errorBodyOf(status, message);
}
export const HOST_RE = /^(\d{1,12})-([a-z0-9]{1,60})\.(.+)$/;

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A TCP port 1..65535 from untrusted text; NaN for anything else (answered 400). */
export function parsePort(v: string): number {
  if (!/^\d{1,5}$/.test(v)) return Number.NaN;
  const n = Number(v);
  return n >= 1 && n <= 65535 ? n : Number.NaN;
}

export function validPort(n: number): boolean {
  return Number.isInteger(n) && n >= 1 && n <= 65535;
}

/** Why a proxy target cannot be served, whatever the sandbox (a 400), or undefined. */
export function targetProblem(t: ProxyTarget): string | undefined {
  if (!t.sandboxId) return "proxy request needs a sandbox ID and a port";
  if (!validPort(t.port)) return "sandbox port must be an integer from 1 to 65535";
  return undefined;
}

/**
 * Which sandbox port a request is for, or undefined for control-plane requests. Order:
 * E2B routing headers (before any route matching: envd's /health collides with ours),
 * then the `{port}-{id}.{domain}` Host form, then the `/proxy/{id}/{port}/...` path form
 * (a bare `/proxy/...` with routing headers is also accepted, the prefix stripped).
 */
export function resolveTarget(req: IncomingMessage): ProxyTarget | undefined {
  const url = req.url ?? "/";
  const isProxyPath = url === "/proxy" || url.startsWith("/proxy/") || url.startsWith("/proxy?");
  const hid = header(req, E2B_SANDBOX_ID_HEADER) ?? header(req, SANDBOX_ID_HEADER);
  if (hid) {
    const raw = header(req, E2B_SANDBOX_PORT_HEADER) ?? header(req, TARGET_PORT_HEADER);
    const port = raw === undefined ? ENVD_PORT : parsePort(raw);
    const path = isProxyPath ? url.slice("/proxy".length) || "/" : url;
    return { sandboxId: hid, port, path: path.startsWith("/") ? path : `/${path}`, via: "header" };
  }
  const host = header(req, "host")?.toLowerCase();
  const hm = host ? HOST_RE.exec(host) : null;
  if (hm) return { sandboxId: hm[2] as string, port: parsePort(hm[1] as string), path: url, via: "host" };
  if (isProxyPath) {
    const m = /^\/proxy\/([^/?]+)\/([^/?]+)(\/[^?]*)?(\?.*)?$/.exec(url);
    if (m) {
      return {
        sandboxId: m[1] as string,
        port: parsePort(m[2] as string),
        path: `${m[3] ?? "/"}${m[4] ?? ""}`,
        via: "path",
      };
    }
    return { sandboxId: "", port: Number.NaN, path: url, via: "path" };
  }
  return undefined;
}
