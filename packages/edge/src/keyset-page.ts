import { badRequest } from "./errors.js";

/**
 * Where a sandbox stands in a list ordered by start time, then ID. A page's `nextToken` is the
 * key of its last item, so the next page is what comes after that key: a node answers one page
 * without counting what came before, a gateway merges one page from each node instead of
 * every node's whole list, and sandboxes created or killed between two pages shift nothing.
 */
export interface ListKey {
  /** Start time, ms since the epoch. */
  at: number;
  id: string;
}

const KEY_RE = /^k:(\d{1,16}):([A-Za-z0-9_-]{1,128})$/;

export function encodeKeyCursor(k: ListKey): string {
  return Buffer.from(`k:${k.at}:${k.id}`).toString("base64url");
}

/** The key a `nextToken` names; undefined for none; a 400 for anything else. */
export function decodeKeyCursor(token: string | undefined): ListKey | undefined {
  if (!token) return undefined;
  const m = KEY_RE.exec(Buffer.from(token, "base64url").toString());
  if (!m) throw badRequest("invalid nextToken");
  return { at: Number(m[1]), id: m[2] as string };
}

/** Ascending by start time, then ID. */
export function compareKeys(a: ListKey, b: ListKey): number {
  return a.at - b.at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/**
 * One page of `items` (already sorted in `order`) after the cursor `q.nextToken`: `limit`
 * items, and the next page's cursor in `setNextToken` when more remain or `more` says another
 * source has more.
 */
export function keysetPage<T>(
  items: readonly T[],
  q: { limit?: number | undefined; nextToken?: string | undefined; order?: "asc" | "desc" | undefined },
  keyOf: (item: T) => ListKey,
  setNextToken: (token: string) => void,
  more = false,
): T[] {
  const after = decodeKeyCursor(q.nextToken);
  const desc = (q.order ?? "desc") === "desc";
  const limit = q.limit ?? 100;
  const beyond = (t: T) => {
    if (!after) return true;
    const c = compareKeys(keyOf(t), after);
    return desc ? c < 0 : c > 0;
  };
  const rest = items.filter(beyond);
  const page = rest.slice(0, limit);
  const last = page[page.length - 1];
  if (last && (rest.length > limit || more)) setNextToken(encodeKeyCursor(keyOf(last)));
  return page;
}
