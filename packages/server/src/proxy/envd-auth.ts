/**
 * The proxy's side of envd authentication. Clients hold a sandbox's client token (E2B's
 * `envdAccessToken`); envd inside holds only a host token derived from it
 * (orchestrator/envd-credentials.ts). The proxy checks what a client presents — the
 * `X-Access-Token` header, or a `/files` URL signed with the client token — and sends envd
 * the host token instead, so the client token never enters a sandbox's memory, where a fork
 * child or a snapshot start could read it.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { ProxyTarget } from "@aenv/edge/proxy-target";
import { computeFileSignature, ENVD_PORT, type FileOp, TRAFFIC_TOKEN_HEADER } from "@aenv/protocol";
import { CODE_INTERPRETER_PORT, codeInterpreterRoute } from "@aenv/protocol/code-interpreter";

/** A sandbox's two tokens, as the proxy needs them. */
export interface EnvdTokens {
  /** What clients must present. */
  client: string;
  /** What envd holds (the host token, or the client token for a sandbox initialised before host tokens). */
  envd: string;
  /** The traffic access token its create answer carried (envd-credentials.ts, trafficTokenOf). */
  traffic?: string;
}

/**
 * What to send upstream in X-Access-Token: a value, or null for none (the client's header
 * removed); or a 401 with envd's own wording.
 */
export type EnvdAuthResult = { accessToken: string | null } | { status: 401; message: string };

const digest = (s: string) => createHash("sha256").update(s).digest();
const same = (a: string, b: string) => timingSafeEqual(digest(a), digest(b));

function firstHeader(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Why a signed `/files` URL is refused (envd's messages), or undefined when it holds. */
function signatureProblem(req: IncomingMessage, t: ProxyTarget, clientToken: string): string | undefined | null {
  const q = t.path.indexOf("?");
  if (q < 0 || t.path.slice(0, q) !== "/files") return null;
  const query = new URLSearchParams(t.path.slice(q + 1));
  const signature = query.get("signature");
  if (!signature) return null;
  const op: FileOp | undefined = req.method === "GET" ? "read" : req.method === "POST" ? "write" : undefined;
  if (!op) return "invalid signature";
  let exp: string | undefined;
  if (query.has("signature_expiration")) {
    exp = query.get("signature_expiration") ?? "";
    if (!/^\d{1,15}$/.test(exp)) return "invalid signature expiration";
    if (Number(exp) * 1000 < Date.now()) return "signature is already expired";
  }
  const want = computeFileSignature(query.get("path") ?? "", op, query.get("username") ?? "", clientToken, exp);
  return same(signature, want) ? undefined : "invalid signature";
}

/**
 * The credential to send a sandbox port. On envd's port a client token or signature must
 * hold (a request with neither goes on without one: envd answers /health, refuses the rest).
 * On other ports a client token the client sent is removed, never passed to the app.
 */
export function envdAuth(req: IncomingMessage, t: ProxyTarget, tokens: EnvdTokens): EnvdAuthResult {
  const presented = firstHeader(req, "x-access-token");
  if (t.port === CODE_INTERPRETER_PORT) return interpreterAuth(req, t, tokens, presented);
  if (t.port !== ENVD_PORT) {
    return presented !== undefined && same(presented, tokens.client)
      ? { accessToken: null }
      : { accessToken: presented ?? null };
  }
  if (presented !== undefined && presented !== "") {
    return same(presented, tokens.client)
      ? { accessToken: tokens.envd }
      : { status: 401, message: "unauthorized access, invalid access token" };
  }
  const problem = signatureProblem(req, t, tokens.client);
  if (problem === null) return { accessToken: null };
  if (problem) return { status: 401, message: problem };
  return { accessToken: tokens.envd };
}

/**
 * The code interpreter's port: the service checks the token envd holds on every route but
 * /health (packages/code-interpreter/src/access.ts), so the proxy hands it the host token for
 * a caller that proved itself, and nothing otherwise. Proof is the client token on any route,
 * or, on the context routes only, the traffic token (the SDKs send just that there; /execute,
 * which runs code, always carries the client token). Any other X-Access-Token is removed, not
 * passed on: a fork child or a snapshot start holds its source's host token in memory, and
 * must not be able to present it to its source's service.
 */
function interpreterAuth(
  req: IncomingMessage,
  t: ProxyTarget,
  tokens: EnvdTokens,
  presented: string | undefined,
): EnvdAuthResult {
  if (presented !== undefined && presented !== "" && same(presented, tokens.client)) {
    return { accessToken: tokens.envd };
  }
  const traffic = firstHeader(req, TRAFFIC_TOKEN_HEADER);
  if (
    traffic !== undefined &&
    tokens.traffic !== undefined &&
    codeInterpreterRoute(t.path) === "contexts" &&
    same(traffic, tokens.traffic)
  ) {
    return { accessToken: tokens.envd };
  }
  return { accessToken: null };
}
