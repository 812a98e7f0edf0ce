/** The signature of a `/files` URL that the SDK computes (uploadUrl / downloadUrl). */
import { createHash } from "node:crypto";

export type FileOp = "read" | "write";

/** `v1_` + unpadded base64 of sha256("path:op:user:token[:expiration]"). */
export function computeFileSignature(p: string, op: FileOp, user: string, token: string, exp?: string): string {
  const raw = exp === undefined ? `${p}:${op}:${user}:${token}` : `${p}:${op}:${user}:${token}:${exp}`;
  return `v1_${createHash("sha256").update(raw, "utf8").digest("base64").replace(/=+$/, "")}`;
}
