/**
 * Sandbox content never shares an origin with the dashboard and the API. The host form
 * (`{port}-{id}.{domain}`) is each sandbox port's own origin and is passed as the sandbox
 * sends it. Every other form (the `/proxy/{id}/{port}/…` path, E2B's routing headers, a signed
 * `/files` URL) is answered on the server's own scheme, host and port, where the dashboard
 * keeps its API key (session storage) and could be covered by a service worker. There a
 * sandbox's response is made an opaque origin of its own: `Content-Security-Policy: sandbox`
 * without `allow-same-origin`, which browsers enforce on the document (no storage, no cookies,
 * no service worker, no script access to the dashboard's windows), with the headers that act
 * on the whole origin removed (a service worker's wider scope, site-data clearing, cookies,
 * opener and embedder policies). A service worker's script is never served from these forms,
 * and the origin's cookies never reach a sandbox.
 */
import type { IncomingMessage } from "node:http";
import type { ProxyTarget } from "@aenv/edge/proxy-target";

/** What a document from a sandbox may do on the shared origin: run, but as no origin at all. */
export const SANDBOXED_CSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

/** Response headers that act on the whole origin, not on the one response. */
const ORIGIN_WIDE = new Set([
  "service-worker-allowed",
  "clear-site-data",
  "set-cookie",
  "cross-origin-opener-policy",
  "cross-origin-embedder-policy",
]);

/** Whether a target is answered on the server's own origin (everything but the host form). */
export function sharesServerOrigin(t: ProxyTarget): boolean {
  return t.via !== "host";
}

/** Why a request on the shared origin is refused (a 403), or undefined. */
export function sharedOriginProblem(req: IncomingMessage, t: ProxyTarget): string | undefined {
  if (!sharesServerOrigin(t)) return undefined;
  // Browsers mark the fetch of a service worker's script: from these forms it would run with
  // the server's origin, over the dashboard.
  if (req.headers["service-worker"] !== undefined) {
    return "a service worker cannot be served on the server's origin: use the sandbox's own host ({port}-{id}.{domain})";
  }
  return undefined;
}

/** The sandbox's response headers as the shared origin may carry them. */
export function isolateResponse(
  t: ProxyTarget,
  headers: Record<string, string | string[]>,
): Record<string, string | string[]> {
  if (!sharesServerOrigin(t)) return headers;
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) if (!ORIGIN_WIDE.has(k.toLowerCase())) out[k] = v;
  // Added beside any policy of the sandbox's own: a browser enforces every one it gets.
  const own = out["content-security-policy"];
  out["content-security-policy"] = own === undefined ? SANDBOXED_CSP : [...[own].flat(), SANDBOXED_CSP];
  return out;
}
