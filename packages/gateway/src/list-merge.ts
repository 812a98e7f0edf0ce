import { compareKeys, keysetPage, type ListKey } from "@aenv/edge/keyset-page";

/** A sandbox as a node's `/v2/sandboxes` lists it: what the merge orders by. */
export interface ListedSandbox {
  startedAt: string;
  sandboxID: string;
}

const keyOf = (s: ListedSandbox): ListKey => ({ at: Date.parse(s.startedAt), id: s.sandboxID });

/**
 * The cluster's page from one page of each node (each already after the client's cursor, in
 * `order`): the first `limit` of them all, and the next cursor when more remain here or a
 * node said it has more. A node's items left out come after its own last one, so after the
 * page's last item too: the next page, asked from that key, finds them.
 */
export function mergeListPages<T extends ListedSandbox>(
  parts: T[][],
  q: { limit: number; order: "asc" | "desc" },
  nodeHasMore: boolean,
): { items: T[]; nextToken?: string } {
  const all = parts.flat().sort((a, b) => compareKeys(keyOf(a), keyOf(b)));
  if (q.order === "desc") all.reverse();
  let nextToken: string | undefined;
  const items = keysetPage(all, q, keyOf, (t) => (nextToken = t), nodeHasMore);
  return nextToken ? { items, nextToken } : { items };
}
