import { InvalidRequestError } from "@aenv/edge/errors";

/**
 * A path of the content API, checked: `/a/b` is relative to the volume root (a leading slash
 * or none), `..` is refused rather than resolved. Resolving it (without following links) is
 * util/beneath.ts's job.
 */
export interface VolumePath {
  /** Canonical form inside the volume: "/" or "/a/b". */
  rel: string;
  /** Components of rel; empty for the root. */
  parts: string[];
}

export function parseVolumePath(raw: string): VolumePath {
  if (raw.includes("\0")) throw new InvalidRequestError("path contains a NUL byte");
  const parts = raw.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) throw new InvalidRequestError(`path '${raw}' leaves the volume ('..' is not allowed)`);
  for (const p of parts) if (p.length > 255) throw new InvalidRequestError("a path component is over 255 bytes");
  return { rel: `/${parts.join("/")}`, parts };
}
