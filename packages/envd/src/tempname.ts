/** Names of envd's upload temp files (`.<name>.envd-<12 hex>.tmp`), hidden from watchers. */
import { randomBytes } from "node:crypto";

const TEMP_RE = /^\.(.+)\.envd-[0-9a-f]{12}\.tmp$/;

export function tempNameFor(base: string): string {
  return `.${base}.envd-${randomBytes(6).toString("hex")}.tmp`;
}

/** The final name a temp file is for, or undefined if `name` is not an envd temp file. */
export function targetOfTemp(name: string): string | undefined {
  return TEMP_RE.exec(name)?.[1];
}
