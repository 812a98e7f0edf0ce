/**
 * Headers of aenv's own hops (gateway → node) and the E2B ones both ends read. One
 * definition each: the gateway sets what a node checks.
 */

/** E2B's: the traffic token a private sandbox (allowPublicTraffic: false) needs on its ports. */
export const TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token";
/** E2B's routing headers: which sandbox, and which of its ports, a request is for. */
export const E2B_SANDBOX_ID_HEADER = "e2b-sandbox-id";
export const E2B_SANDBOX_PORT_HEADER = "e2b-sandbox-port";
/** aenv's spelling of the same routing, read where E2B's are absent. */
export const SANDBOX_ID_HEADER = "x-aenv-sandbox-id";
export const TARGET_PORT_HEADER = "x-aenv-target-port";
/** Gateway → node on connect: the resume is for traffic, so only if the sandbox has autoResume. */
export const AUTO_RESUME_HEADER = "x-aenv-auto-resume";
/**
 * Gateway → node with AUTO_RESUME_HEADER: the sandbox port the traffic is for. The node
 * checks the traffic's own credentials (TRAFFIC_TOKEN_HEADER, passed on as the client sent
 * it) against the paused sandbox before resuming it, as its proxy would.
 */
export const TRAFFIC_PORT_HEADER = "x-aenv-traffic-port";
/** Gateway → client on a merged list: the nodes that did not answer, so the list may be short. */
export const PARTIAL_HEADER = "x-aenv-partial";
/**
 * E2B's `X-Total-Running` on GET /v2/sandboxes: the running sandboxes that match the filters,
 * before pagination; sent only when running ones were asked for.
 */
export const TOTAL_RUNNING_HEADER = "x-total-running";

/**
 * The fork-spill hop (gateway → node, POST /sandboxes/{id}/fork). A gateway that sends
 * `request` asks the node to start what fits on it and to capture the rest as one snapshot
 * instead of failing them. The node answers `created` with the usual ForkResult list; the
 * children it could not hold are errors with `error_code` `spilledErrorCode` (no room), and the
 * snapshot they are to start from elsewhere is named in `snapshotHeader` (a header, so the
 * body stays the list the SDK expects). The gateway deletes that snapshot once they run.
 */
export const FORK_SPILL = {
  request: { header: "x-aenv-fork-spill", value: "1" },
  snapshotHeader: "x-aenv-fork-snapshot",
  created: 201,
  spilledErrorCode: "sandbox_capacity_unavailable",
} as const;

/**
 * A create's idempotency key: a client that retries a create (after a timeout, a lost answer)
 * with the same key gets the sandbox the first attempt made, not a second one, while that
 * sandbox exists; a retry while the first is still starting waits for it. Given as the
 * `Idempotency-Key` header or, for the unmodified E2B SDKs (which send no custom headers), as
 * this metadata entry; the header is kept in the sandbox's metadata under the same entry, so
 * it lasts as long as the sandbox and lists can be filtered by it.
 */
export const IDEMPOTENCY = {
  header: "idempotency-key",
  metadataKey: "aenv.idempotency_key",
  /** Printable ASCII without spaces, at most this long. */
  maxLength: 200,
} as const;

/** The create's idempotency key from its header and metadata; an error message when it is malformed. */
export function idempotencyKeyOf(
  header: string | string[] | undefined,
  metadata: Record<string, string> | undefined,
): { key?: string; error?: string } {
  const h = Array.isArray(header) ? header[0] : header;
  const m = metadata?.[IDEMPOTENCY.metadataKey];
  if (h !== undefined && m !== undefined && h !== m)
    return { error: `the ${IDEMPOTENCY.header} header and metadata ${IDEMPOTENCY.metadataKey} differ` };
  const key = h ?? m;
  if (key === undefined) return {};
  if (key.length === 0 || key.length > IDEMPOTENCY.maxLength || !/^[\x21-\x7e]+$/.test(key))
    return { error: `an idempotency key is 1-${IDEMPOTENCY.maxLength} printable ASCII characters without spaces` };
  return { key };
}

/** E2B's headers on a webhook delivery; the signature is over the secret followed by the body. */
export const WEBHOOK_HEADERS = {
  webhookId: "e2b-webhook-id",
  deliveryId: "e2b-delivery-id",
  signatureVersion: "e2b-signature-version",
  signature: "e2b-signature",
} as const;

/**
 * Gateway → node, on every request carrying a tenant's key: proof that a gateway passed it
 * on (an HMAC of the key under the operator's key, @aenv/edge/gateway-proof.ts). In a
 * cluster, keys' limits are counted by the gateways, so a node refuses a tenant's key
 * without it; the gateway drops whatever a client sent under this name, and a node's proxy
 * never passes it to a sandbox.
 */
export const GATEWAY_PROOF_HEADER = "x-aenv-gateway-proof";
