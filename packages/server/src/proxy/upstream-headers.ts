import type { IncomingMessage } from "node:http";
import {
  E2B_SANDBOX_ID_HEADER,
  E2B_SANDBOX_PORT_HEADER,
  GATEWAY_PROOF_HEADER,
  SANDBOX_ID_HEADER,
  TARGET_PORT_HEADER,
  TRAFFIC_TOKEN_HEADER,
} from "@aenv/protocol";

const ROUTING_HEADERS = [
  E2B_SANDBOX_ID_HEADER,
  E2B_SANDBOX_PORT_HEADER,
  SANDBOX_ID_HEADER,
  TARGET_PORT_HEADER,
  TRAFFIC_TOKEN_HEADER,
];
/**
 * The platform's own credential never reaches code in a sandbox, whatever port it asked for
 * (a client that sends its API key on every request would otherwise hand it to the sandbox),
 * nor does a gateway's proof of it. Authorization and cookies stay: aenv does not use them, a
 * server in the sandbox may.
 */
const PLATFORM_SECRETS = ["x-api-key", GATEWAY_PROOF_HEADER];
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
  "proxy-authorization",
  "proxy-authenticate",
]);

export interface UpstreamOptions {
  /** Host header to send instead of the client's (maskRequestHost, `${PORT}` replaced). */
  host?: string;
  /** Whether an Authorization value is the platform's own credential (never forwarded). */
  isPlatformCredential?: (authorization: string) => boolean;
  /** X-Access-Token to send instead of the client's (proxy/envd-auth.ts); null: none. */
  accessToken?: string | null;
  /** Leave out the client's cookies (a request on the server's own origin: origin-isolation.ts). */
  dropCookies?: boolean;
}

/** Request headers to send upstream: routing, hop-by-hop and platform credentials removed. */
export function upstreamHeaders(
  req: IncomingMessage,
  keepUpgrade: boolean,
  opts: UpstreamOptions = {},
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined) continue;
    if (ROUTING_HEADERS.includes(k) || PLATFORM_SECRETS.includes(k)) continue;
    if (k === "cookie" && opts.dropCookies) continue;
    if (k === "authorization" && typeof v === "string" && opts.isPlatformCredential?.(v)) continue;
    if (!keepUpgrade && HOP_BY_HOP.has(k)) continue;
    if (keepUpgrade && HOP_BY_HOP.has(k) && k !== "connection" && k !== "upgrade") continue;
    out[k] = v;
  }
  if (req.headers["transfer-encoding"] && !keepUpgrade) out["transfer-encoding"] = "chunked";
  if (opts.host) out.host = opts.host;
  if (opts.accessToken !== undefined) delete out["x-access-token"];
  if (opts.accessToken) out["x-access-token"] = opts.accessToken;
  const fwd = req.socket.remoteAddress;
  if (fwd) out["x-forwarded-for"] = fwd;
  const canonical: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(out)) canonical[canonicalName(k)] = v;
  return canonical;
}

/**
 * `content-type` → `Content-Type`: E2B's proxy (Go) sends header names in this form and apps
 * behind it read them so (Node has lowercased them on the way in).
 */
function canonicalName(k: string): string {
  return k.replace(/(^|-)([a-z])/g, (_, dash: string, c: string) => dash + c.toUpperCase());
}
