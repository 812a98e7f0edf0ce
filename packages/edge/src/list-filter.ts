import { badRequest } from "./errors.js";

/**
 * The SDK encodes metadata filters three times (encodeURIComponent per key/value,
 * URLSearchParams, then the query string); the framework has undone the last one.
 */
export function parseMetadataFilter(raw: string | undefined): Record<string, string> {
  if (!raw) return {};
  let decoded: string;
  try {
    decoded = decodeURIComponent(raw);
  } catch {
    throw badRequest("metadata filter is not valid URL encoding");
  }
  const out: Record<string, string> = {};
  for (const pair of decoded.split("&")) {
    if (!pair) continue;
    const parts = pair.split("=");
    if (parts.length !== 2) throw badRequest(`invalid metadata filter '${pair}': expected key=value`);
    try {
      out[decodeURIComponent(parts[0] as string)] = decodeURIComponent(parts[1] as string);
    } catch {
      throw badRequest(`invalid metadata filter '${pair}'`);
    }
  }
  return out;
}

export function parseStates(raw: string | undefined): Set<string> {
  if (!raw) return new Set(["running", "paused"]);
  const states = raw
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  for (const s of states) if (s !== "running" && s !== "paused") throw badRequest(`invalid state '${s}'`);
  return new Set(states);
}

/** Whether a sandbox's metadata has every key=value of the filter. */
export function matchesMetadata(r: { metadata: Record<string, string> }, filter: Record<string, string>): boolean {
  return Object.entries(filter).every(([k, v]) => r.metadata[k] === v);
}

/** Opaque cursor: the position after the last item returned. */
export function encodeCursor(offset: number): string {
  return Buffer.from(`o:${offset}`).toString("base64url");
}

export function decodeCursor(token: string | undefined): number {
  if (!token) return 0;
  const m = /^o:(\d+)$/.exec(Buffer.from(token, "base64url").toString());
  if (!m) throw badRequest("invalid nextToken");
  return Number(m[1]);
}

/**
 * One page of a list endpoint: `limit` items from the `nextToken` cursor, with the cursor of
 * the next page in `X-Next-Token` when there is one.
 */
export function paginate<T>(
  items: readonly T[],
  q: { limit?: number; nextToken?: string },
  setNextToken: (token: string) => void,
): T[] {
  const offset = decodeCursor(q.nextToken);
  const limit = q.limit ?? 100;
  if (offset + limit < items.length) setNextToken(encodeCursor(offset + limit));
  return items.slice(offset, offset + limit);
}
