import type { IncomingMessage } from "node:http";
import { withGatewayProof } from "@aenv/edge/gateway-proof";
import { GATEWAY_PROOF_HEADER } from "@aenv/protocol";

/**
 * What tells a node that a tenant's request came through this gateway (@aenv/edge/
 * gateway-proof.ts): every request passed on to a node, forwarded or called, goes through
 * `signedForNode`. The key is the operator's, which a gateway process holds for the one
 * cluster it serves: set once when the gateway is built.
 */
let operatorKey: string | undefined;

export function signNodeRequestsWith(key: string): void {
  operatorKey = key;
}

/** `out` (headers for a node) with the client's own proof header dropped and this gateway's added. */
export function signedForNode<H extends Record<string, string | string[] | undefined>>(
  req: IncomingMessage,
  out: H,
): H {
  if (operatorKey === undefined) {
    delete out[GATEWAY_PROOF_HEADER];
    return out;
  }
  return withGatewayProof(operatorKey, req.headers, out);
}
