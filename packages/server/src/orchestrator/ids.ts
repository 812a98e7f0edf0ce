import { randomBytes } from "node:crypto";

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

/** "i" + 20 lowercase alphanumerics: DNS-label safe, fixed length (runsc matches IDs by prefix). */
export function newSandboxId(): string {
  const bytes = randomBytes(20);
  let s = "i";
  for (const b of bytes) s += ALPHABET[b % ALPHABET.length];
  return s;
}

export const SANDBOX_ID_RE = /^i[a-z0-9]{20}$/;

export function newToken(): string {
  return randomBytes(32).toString("hex");
}

export function newClientId(): string {
  return randomBytes(4).toString("hex");
}
