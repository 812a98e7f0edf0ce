/** Access-token and URL-signature checks. */
import { createHash, timingSafeEqual } from "node:crypto";
import { computeFileSignature, type FileOp } from "@aenv/protocol";

/** Constant-time string equality (hashing equalises lengths). */
export function safeEqual(a: string, b: string): boolean {
  const ha = createHash("sha256").update(a, "utf8").digest();
  const hb = createHash("sha256").update(b, "utf8").digest();
  return timingSafeEqual(ha, hb) && a.length === b.length;
}

export type AuthResult = { ok: true } | { ok: false; message: string };

/** Plain token check: allowed when no token is set, else the header must match. */
export function checkToken(token: string | undefined, header: string | null | undefined): AuthResult {
  if (token === undefined) return { ok: true };
  if (header == null || header === "")
    return { ok: false, message: "unauthorized access, please provide a valid access token" };
  if (!safeEqual(header, token)) return { ok: false, message: "unauthorized access, invalid access token" };
  return { ok: true };
}

export type { FileOp };

/**
 * /files auth: no token → allow; X-Access-Token present → must match;
 * otherwise a valid, unexpired `signature` query parameter is required.
 */
export function checkFilesAuth(
  token: string | undefined,
  header: string | null | undefined,
  query: URLSearchParams,
  op: FileOp,
  nowMs = Date.now(),
): AuthResult {
  if (token === undefined) return { ok: true };
  if (header != null && header !== "") return checkToken(token, header);
  const sig = query.get("signature");
  if (!sig) return { ok: false, message: "unauthorized access, missing access token or signature" };
  const expRaw = query.get("signature_expiration") ?? undefined;
  if (expRaw !== undefined) {
    const exp = Number(expRaw);
    if (!Number.isFinite(exp) || !/^\d+$/.test(expRaw)) return { ok: false, message: "invalid signature expiration" };
    if (exp * 1000 < nowMs) return { ok: false, message: "signature is already expired" };
  }
  const expected = computeFileSignature(query.get("path") ?? "", op, query.get("username") ?? "", token, expRaw);
  if (!safeEqual(sig, expected)) return { ok: false, message: "invalid signature" };
  return { ok: true };
}
