import { compareKeys, encodeKeyCursor, type ListKey } from "@aenv/edge/keyset-page";

/** A sandbox as a node's `/v2/sandboxes` lists it: what the merge orders by. */
export interface ListedSandbox {
  startedAt: string;
  sandboxID: string;
}

/** One node's page: its items after the cursor asked with, in order, and whether it has more. */
export interface NodePage<T> {
  items: T[];
  more: boolean;
}

const keyOf = (s: ListedSandbox): ListKey => ({ at: Date.parse(s.startedAt), id: s.sandboxID });

/**
 * The cluster's page of `limit` sandboxes after the client's cursor, from pages of every node
 * (`ask`: a node's page after a cursor, undefined when it did not answer). Each node is first
 * asked for a share of the page (about twice its part of `limit` when they hold alike), so a
 * page costs about 2 × limit items however many nodes there are. A node that has more and
 * whose last item comes before the page's last may hold items of the page it did not send:
 * only those nodes are asked again, for up to `limit` after their last item, which reaches
 * past the page's end (a node's `limit`-th item after the cursor is never before the
 * cluster's). So at most two rounds, and the next cursor is the page's last key.
 */
export async function clusterPage<N, T extends ListedSandbox>(
  nodes: N[],
  ask: (node: N, nextToken: string | undefined, limit: number) => Promise<NodePage<T> | undefined>,
  q: { limit: number; order: "asc" | "desc"; nextToken?: string | undefined },
): Promise<{ items: T[]; nextToken?: string }> {
  const sign = q.order === "asc" ? 1 : -1;
  const cmp = (a: T, b: T) => sign * compareKeys(keyOf(a), keyOf(b));
  const share = nodes.length <= 2 ? q.limit : Math.min(q.limit, Math.ceil((2 * q.limit) / nodes.length) + 1);
  const pages = await Promise.all(nodes.map((n) => ask(n, q.nextToken, share)));
  const state = pages.map((p) => (p ? { items: [...p.items], more: p.more } : { items: [] as T[], more: false }));
  const merged = () => state.flatMap((s) => s.items).sort(cmp);
  const all = merged();
  const edge = all[q.limit - 1];
  const again = state
    .map((s, i) => ({ s, i, last: s.items[s.items.length - 1] }))
    .filter(({ s, last }) => s.more && last && (!edge || cmp(last, edge) < 0));
  if (again.length) {
    await Promise.all(
      again.map(async ({ s, i, last }) => {
        const p = await ask(nodes[i] as N, encodeKeyCursor(keyOf(last as T)), q.limit);
        if (!p) return;
        s.items.push(...p.items);
        s.more = p.more;
      }),
    );
  }
  const final = again.length ? merged() : all;
  const items = final.slice(0, q.limit);
  const last = items[items.length - 1];
  const more = final.length > q.limit || state.some((s) => s.more);
  return last && more ? { items, nextToken: encodeKeyCursor(keyOf(last)) } : { items };
}
