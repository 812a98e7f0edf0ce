import { createHmac, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { GATEWAY_PROOF_HEADER } from "@aenv/protocol";
import { keyOf } from "./tenancy.js";

/**
 * Proof that a gateway passed a tenant's request on to a node. Behind gateways, keys' limits
 * (concurrent sandboxes, creates a second, calls a window) are counted in the gateways'
 * Redis; a node does not count them, so a tenant calling a node directly would not be held
 * to them. The gateway, which holds the operator's key as every node does, adds an HMAC of
 * the caller's key under it; a cluster node takes a tenant's key only with that proof. It is
 * bound to the key, so one key's proof opens nothing for another.
 */

const LABEL = "aenv gateway proof v1\0";

/** The proof for `key`, as the gateway sends it. */
export function gatewayProof(operatorKey: string, key: string): string {
  return createHmac("sha256", operatorKey).update(LABEL).update(key).digest("base64url");
}

/** Whether the request's key comes with a gateway's proof for it (constant-time). */
export function hasGatewayProof(operatorKey: string, headers: IncomingHttpHeaders): boolean {
  const key = keyOf(headers);
  const sent = headers[GATEWAY_PROOF_HEADER];
  if (!key || typeof sent !== "string") return false;
  const want = Buffer.from(gatewayProof(operatorKey, key));
  const got = Buffer.from(sent);
  return got.length === want.length && timingSafeEqual(got, want);
}

/**
 * The headers a gateway sends a node for a client's request: the client's own proof header
 * (a forgery) dropped, and the gateway's added when the request carries a key.
 */
export function withGatewayProof<H extends Record<string, string | string[] | undefined>>(
  operatorKey: string,
  clientHeaders: IncomingHttpHeaders,
  out: H,
): H {
  delete out[GATEWAY_PROOF_HEADER];
  const key = keyOf(clientHeaders);
  if (key) (out as Record<string, string>)[GATEWAY_PROOF_HEADER] = gatewayProof(operatorKey, key);
  return out;
}
