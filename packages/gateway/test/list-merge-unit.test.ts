// The cluster's sandbox list, page by page: each node sends a share of a page after the
// client's cursor, those that may hold more of it are asked again, and the gateway keeps the
// first `limit` of them all. Walked to the end it gives every
// sandbox once, in order, for either order; sandboxes made or killed between two pages move
// nothing that was not theirs; a cursor that is not one is a 400. Nodes are played here by the
// same page function the nodes run (keyset-page.ts), over their own sorted lists.
import assert from "node:assert/strict";
import { test } from "node:test";
import { compareKeys, keysetPage } from "@aenv/edge/keyset-page";
import { clusterPage, type ListedSandbox } from "../src/list-merge.js";

const sbx = (id: string, at: number): ListedSandbox => ({ sandboxID: id, startedAt: new Date(at).toISOString() });
const keyOf = (s: ListedSandbox) => ({ at: Date.parse(s.startedAt), id: s.sandboxID });

/** What a node answers: its page after the cursor, and whether it has more. */
function nodePage(items: ListedSandbox[], q: { limit: number; order: "asc" | "desc"; nextToken?: string }) {
  const sorted = [...items].sort((a, b) => compareKeys(keyOf(a), keyOf(b)));
  if (q.order === "desc") sorted.reverse();
  let more = false;
  const page = keysetPage(sorted, q, keyOf, () => (more = true));
  return { page, more };
}

/** Walks the cluster's list to its end; returns the IDs seen and the items the nodes sent. */
async function walk(
  nodes: ListedSandbox[][],
  limit: number,
  order: "asc" | "desc",
  between?: (page: number) => void,
): Promise<{ seen: string[]; sent: number; pages: number }> {
  const seen: string[] = [];
  let sent = 0;
  let token: string | undefined;
  for (let i = 0; i < 1000; i++) {
    const ask = async (n: number, t: string | undefined, l: number) => {
      const { page, more } = nodePage(nodes[n] as ListedSandbox[], { limit: l, order, ...(t ? { nextToken: t } : {}) });
      sent += page.length;
      return { items: page, more };
    };
    const merged = await clusterPage([...nodes.keys()], ask, { limit, order, nextToken: token });
    assert.ok(merged.items.length <= limit);
    seen.push(...merged.items.map((s) => s.sandboxID));
    if (!merged.nextToken) return { seen, sent, pages: i + 1 };
    token = merged.nextToken;
    between?.(i);
  }
  throw new Error("no end");
}

test("walked to the end: every sandbox once, in order, whichever node holds it", async () => {
  // Three nodes, uneven, with equal start times across them (the ID breaks the tie).
  const nodes: ListedSandbox[][] = [[], [], []];
  const all: ListedSandbox[] = [];
  for (let i = 0; i < 250; i++) {
    const s = sbx(`s${String(i).padStart(3, "0")}`, 1_700_000_000_000 + Math.floor(i / 3) * 1000);
    all.push(s);
    (nodes[i % 7 === 0 ? 0 : i % 2 ? 1 : 2] as ListedSandbox[]).push(s);
  }
  const asc = [...all].sort((a, b) => compareKeys(keyOf(a), keyOf(b))).map((s) => s.sandboxID);
  for (const limit of [1, 7, 100]) {
    assert.deepEqual((await walk(nodes, limit, "asc")).seen, asc, `asc, limit ${limit}`);
    assert.deepEqual((await walk(nodes, limit, "desc")).seen, [...asc].reverse(), `desc, limit ${limit}`);
  }
});

test("many nodes: each sends a share of the page, and only those that may hold more of it are asked again", async (t) => {
  // 50 nodes of 40 sandboxes each, one of them holding the 300 newest as well (skewed).
  const nodes: ListedSandbox[][] = Array.from({ length: 50 }, () => []);
  for (let i = 0; i < 2000; i++) (nodes[i % 50] as ListedSandbox[]).push(sbx(`a${i}`, 1000 + i));
  for (let i = 0; i < 300; i++) (nodes[7] as ListedSandbox[]).push(sbx(`b${i}`, 10_000 + i));
  const { seen, sent, pages } = await walk(nodes, 100, "desc");
  assert.equal(seen.length, 2300);
  assert.equal(new Set(seen).size, 2300);
  assert.equal(seen[0], "b299", "newest first");
  // A page asked every node for its whole share of 100 before: 5,000 items a page.
  t.diagnostic(`${sent} items sent for ${pages} pages`);
  assert.ok(sent < pages * 600, `${sent} items sent for ${pages} pages`);
});

test("sandboxes made or killed between pages shift nothing else", async () => {
  const nodes: ListedSandbox[][] = [[], []];
  for (let i = 0; i < 40; i++) (nodes[i % 2] as ListedSandbox[]).push(sbx(`s${String(i).padStart(2, "0")}`, 1000 + i));
  const { seen } = await walk(nodes, 10, "asc", (page) => {
    if (page !== 0) return;
    // After the first page: one listed already goes, one not listed yet goes, and new ones come
    // (newest last in ascending order).
    nodes[0] = (nodes[0] as ListedSandbox[]).filter((s) => s.sandboxID !== "s02" && s.sandboxID !== "s20");
    (nodes[1] as ListedSandbox[]).push(sbx("s40", 5000), sbx("s41", 5001));
  });
  const expected = [...Array(42).keys()].map((i) => `s${String(i).padStart(2, "0")}`).filter((id) => id !== "s20");
  assert.deepEqual(seen, expected, "no item skipped or repeated; the killed one missing only if not yet listed");
});

test("a cursor that is not one is refused", () => {
  for (const bad of [
    "garbage!!",
    Buffer.from("o:10").toString("base64url"),
    Buffer.from("k:1:../x").toString("base64url"),
  ]) {
    assert.throws(() => keysetPage([], { nextToken: bad }, keyOf, () => {}), /invalid nextToken/);
  }
});
