import { createHash } from "node:crypto";

/**
 * Holders in the order a content key is asked of them: highest sha256(key, holder) first.
 * Each key has its own order, so a fill spreads over the holders, and every node asks the same
 * holder first for the same key (its page cache serves the next node too).
 */
export function rendezvous<T extends { name: string }>(holders: T[], key: string): T[] {
  const score = (h: T) => createHash("sha256").update(`${key}\n${h.name}`).digest("hex");
  return holders
    .map((h) => ({ h, s: score(h) }))
    .sort((a, b) => (a.s < b.s ? 1 : a.s > b.s ? -1 : 0))
    .map((x) => x.h);
}
