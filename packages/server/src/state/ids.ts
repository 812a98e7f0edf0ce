import { randomBytes } from "node:crypto";

const ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789";

function alphanumerics(n: number): string {
  let s = "";
  for (const b of randomBytes(n)) s += ALPHABET[b % ALPHABET.length];
  return s;
}

/** "i" + 20 lowercase alphanumerics: DNS-label safe, fixed length (runsc matches IDs by prefix). */
export function newSandboxId(): string {
  return `i${alphanumerics(20)}`;
}

/** Template IDs in the E2B style: 20 lowercase alphanumerics. */
export function newTemplateId(): string {
  return alphanumerics(20);
}

export const SANDBOX_ID_RE = /^i[a-z0-9]{20}$/;

export function newToken(): string {
  return randomBytes(32).toString("hex");
}

export function newClientId(): string {
  return randomBytes(4).toString("hex");
}
