/**
 * `/files?…&signature=…` with no sandbox named in it: what the SDK's `uploadUrl()` and
 * `downloadUrl()` return when E2B_SANDBOX_URL points at this server. The signature is made with
 * one sandbox's envd access token, so it names that sandbox: the one whose token reproduces it.
 */
import { timingSafeEqual } from "node:crypto";
import { computeFileSignature, ENVD_PORT, type FileOp } from "@aenv/protocol";
import type { ProxyTarget } from "./proxy-target.js";

/** Finds the sandbox whose envd token satisfies `matches`. */
export type TokenSearch = (matches: (token: string) => boolean) => string | undefined;

const SIGNATURE_RE = /^v1_[A-Za-z0-9+/]{43}$/;

export const NO_SIGNER = "no sandbox here signed this URL (it is gone, or the URL was changed)";

/** The request as far as signing goes (an IncomingMessage will do). */
export interface SignedRequest {
  url?: string;
  method?: string;
}

/** The query of a `/files` request, or undefined for any other path. */
function filesQuery(req: SignedRequest): URLSearchParams | undefined {
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  return q > 0 && url.slice(0, q) === "/files" ? new URLSearchParams(url.slice(q + 1)) : undefined;
}

/** Whether this is a signed `/files` request that names no sandbox (cheap: no hashing). */
export function isSignedFiles(req: SignedRequest): boolean {
  return filesQuery(req)?.has("signature") ?? false;
}

/** Whether that request's signature has the SDK's form (v1_ + 43 base64 characters). */
export function wellFormedSignature(req: SignedRequest): boolean {
  return SIGNATURE_RE.test(filesQuery(req)?.get("signature") ?? "");
}

/** A proxy target for a signed `/files` URL; a refusal when no sandbox signed it; else undefined. */
export function signedFilesTarget(
  req: SignedRequest,
  search: TokenSearch,
): { target: ProxyTarget } | { refusal: string } | undefined {
  const query = filesQuery(req);
  const op: FileOp | undefined = req.method === "GET" ? "read" : req.method === "POST" ? "write" : undefined;
  const signature = query?.get("signature");
  if (!query || !op || !signature) return undefined;
  // Checked before any hashing: one request costs at most a hash per sandbox on this node.
  if (!SIGNATURE_RE.test(signature)) return { refusal: "invalid signature" };
  const want = Buffer.from(signature);
  const path = query.get("path") ?? "";
  const user = query.get("username") ?? "";
  const exp = query.get("signature_expiration") ?? undefined;
  const id = search((token) => timingSafeEqual(Buffer.from(computeFileSignature(path, op, user, token, exp)), want));
  if (!id) return { refusal: NO_SIGNER };
  return { target: { sandboxId: id, port: ENVD_PORT, path: req.url ?? "/", via: "signature" } };
}
