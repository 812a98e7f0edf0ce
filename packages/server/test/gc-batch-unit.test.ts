// Chunks freed by deleted manifests are collected in batches: a burst of deletes runs one
// collection at a time, the deletes arriving meanwhile share the next, and each delete
// resolves only after a collection that considered its chunks; a failed collection rejects
// no delete (the periodic one collects what it missed).
import assert from "node:assert/strict";
import { test } from "node:test";
import { GcBatcher } from "../src/storage/repository/gc-batch.js";

test("a burst of deletes: two collections, each delete after the one covering its chunks", async () => {
  const runs: string[][] = [];
  let release = () => {};
  const b = new GcBatcher(async (only) => {
    runs.push([...only].sort());
    if (runs.length === 1) await new Promise<void>((r) => (release = r));
  });
  const resolved: string[] = [];
  const first = b.free(["a"]).then(() => resolved.push("a"));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(runs, [["a"]], "the first collection started at once");
  const rest = ["b", "c", "d", "e"].map((d) => b.free([d, "shared"]).then(() => resolved.push(d)));
  await new Promise((r) => setTimeout(r, 10));
  assert.deepEqual(resolved, [], "nothing resolves before its collection ended");
  release();
  await Promise.all([first, ...rest]);
  assert.deepEqual(runs, [["a"], ["b", "c", "d", "e", "shared"]], "the four waiting shared one collection");
  assert.deepEqual(resolved, ["a", "b", "c", "d", "e"]);
  await b.free(["f"]);
  assert.deepEqual(runs.at(-1), ["f"], "a later delete starts its own");
});

test("a failed collection rejects no delete, and the next still runs", async () => {
  let calls = 0;
  const b = new GcBatcher(async () => {
    calls++;
    if (calls === 1) throw new Error("repository unreachable");
  });
  await b.free(["a"]);
  await b.free(["b"]);
  assert.equal(calls, 2);
});
