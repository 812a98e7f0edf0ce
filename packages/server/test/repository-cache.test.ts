/** The snapshot repository's node-local chunk cache: eviction, pins, coalesced fetches, fresh listings, corruption. */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ChunkCache } from "../src/storage/repository/chunk-cache.js";
import { ChunkRepository } from "../src/storage/repository/chunk-repository.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import {
  digestsOf,
  distinctChunks,
  folder,
  fresh,
  MiB,
  newCache,
  SpyBackend,
  seeded,
  testKey,
} from "./helpers/repository-kit.js";

describe("node-local chunk cache", () => {
  test("LRU eviction within the byte bound; pinned chunks are never evicted", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    const writer = new ChunkRepository(b, testKey, { cacheOnCommit: false });
    // Three snapshots of several chunks each, all different.
    const a = seeded(4 * MiB, 12);
    const c = seeded(3 * MiB, 13);
    const d = seeded(4 * MiB, 14);
    const [da, dc, dd] = [a, c, d].map(digestsOf) as [string[], string[], string[]];
    assert.equal(new Set([...da, ...dc, ...dd]).size, da.length + dc.length + dd.length);
    assert.ok(dc.length >= 2, `${dc.length} chunks`);
    await writer.commit("snap_a", folder({ f: a }), {});
    await writer.commit("snap_c", folder({ f: c }), {});
    await writer.commit("snap_d", folder({ f: d }), {});
    const cache = newCache(a.length + d.length); // room for a and c, or a and d, not all three
    const repo = new ChunkRepository(b, testKey, { cache });
    assert.equal(await repo.pin("snap_a"), true);
    await repo.materialize("snap_a", join(fresh("o"), "a"));
    await repo.materialize("snap_c", join(fresh("o"), "c"));
    assert.equal(repo.metrics().evictions, 0);
    await repo.materialize("snap_d", join(fresh("o"), "d")); // evicts all of c (a is pinned)
    assert.equal(cache.usedBytes, cache.maxBytes);
    assert.equal(repo.metrics().evictions, dc.length);
    assert.deepEqual(
      [...da, ...dd].filter((x) => !cache.has(x)),
      [],
    );
    assert.deepEqual(
      dc.filter((x) => cache.has(x)),
      [],
    );
    b.chunkGets = 0;
    await repo.materialize("snap_a", join(fresh("o"), "a2"));
    await repo.materialize("snap_d", join(fresh("o"), "d2"));
    assert.equal(b.chunkGets, 0);
    // a cache full of pinned chunks still serves reads, straight through (bypassed)
    assert.equal(cache.isPinned(dd[0] as string), false);
    await repo.pin("snap_d");
    assert.ok(dd.every((x) => cache.isPinned(x)));
    const before = repo.metrics().bypassed;
    const out = join(fresh("o"), "c2");
    await repo.materialize("snap_c", out);
    assert.deepEqual(readFileSync(join(out, "f")), c);
    assert.equal(b.chunkGets, dc.length);
    assert.equal(repo.metrics().bypassed, before + dc.length);
    assert.equal(repo.metrics().evictions, dc.length);
    assert.equal(cache.usedBytes, cache.maxBytes);
    // unpinning makes room again; c's chunks evict a's, least recently used (d was read after a)
    repo.unpin("snap_a");
    repo.unpin("snap_d");
    b.chunkGets = 0;
    await repo.materialize("snap_c", join(fresh("o"), "c3"));
    assert.equal(b.chunkGets, dc.length);
    assert.ok(dc.every((x) => cache.has(x)));
    assert.ok(dd.every((x) => cache.has(x)));
    assert.ok(da.some((x) => !cache.has(x)));
    assert.ok(cache.usedBytes <= cache.maxBytes);
    b.chunkGets = 0;
    await repo.materialize("snap_c", join(fresh("o"), "c4"));
    assert.equal(b.chunkGets, 0);
  });

  test("concurrent materializes of one snapshot fetch each chunk once (coalesced)", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    const data = seeded(12 * MiB, 15);
    const n = distinctChunks(data);
    assert.ok(n >= 3, `${n} chunks`);
    await new ChunkRepository(b, testKey, { cacheOnCommit: false }).commit("snap_co", folder({ f: data }), {});
    const repo = new ChunkRepository(b, testKey, { cache: newCache() });
    b.chunkGets = 0;
    await Promise.all(Array.from({ length: 5 }, (_, i) => repo.materialize("snap_co", join(fresh("o"), `c${i}`))));
    assert.equal(b.chunkGets, n);
    assert.equal(repo.metrics().backendGets, n);
    assert.equal(repo.metrics().coalesced + repo.metrics().hits, 4 * n); // the other four reads of each chunk
  });

  test("fresh listings: a burst shares one listing, and nothing committed before the call is missed", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    const repo = new ChunkRepository(b, testKey, { cache: newCache() });
    // Another process (a second server, import-template) writes through its own instance.
    const other = new ChunkRepository(b, testKey, { cache: newCache() });
    await repo.commit("snap_l1", folder({ f: randomBytes(1000) }), {});
    b.lists = 0; // a commit lists leases and GC locks
    const [x, y] = await Promise.all([repo.listFresh(), repo.listFresh()]);
    assert.equal(b.lists, 2, "the second call arrived while the first listed: it waits for a listing of its own");
    assert.deepEqual(
      x.map((m) => m.id),
      ["snap_l1"],
    );
    assert.deepEqual(
      y.map((m) => m.id),
      ["snap_l1"],
    );
    // A burst of many costs at most two listings.
    b.lists = 0;
    await Promise.all(Array.from({ length: 20 }, () => repo.listFresh()));
    assert.ok(b.lists <= 2, `${b.lists} listings for a burst of 20`);
    // Committed by the other instance just before the call: always seen, however soon.
    await repo.listFresh();
    await other.commit("snap_l2", folder({ f: randomBytes(1000) }), {});
    assert.deepEqual(
      (await repo.listFresh()).map((m) => m.id),
      ["snap_l1", "snap_l2"],
    );
    // Committed while a listing was in flight: a call made after the commit still sees it.
    const inFlight = repo.listFresh();
    await other.commit("snap_l3", folder({ f: randomBytes(1000) }), {});
    const after = repo.listFresh();
    await inFlight;
    assert.ok((await after).some((m) => m.id === "snap_l3"));
    await other.delete("snap_l1");
    assert.deepEqual(
      (await repo.listFresh()).map((m) => m.id),
      ["snap_l2", "snap_l3"],
    );
  });

  test("announced commits: listed until withdrawn, old ones ignored; waitFor sees the manifest when it lands", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    const repo = new ChunkRepository(b, testKey, { cache: newCache() });
    const other = new ChunkRepository(b, testKey, { cache: newCache() });
    await repo.announce("snap_p1", ["named"]);
    assert.deepEqual(
      (await other.announced()).map((a) => [a.id, a.names]),
      [["snap_p1", ["named"]]],
    );
    assert.deepEqual(await other.announced(-1), [], "older than the bound: ignored");
    assert.equal(await other.waitFor("snap_p1", 100), undefined, "nothing committed: undefined after the timeout");
    const waiting = other.waitFor("snap_p1", 10_000);
    await repo.commit("snap_p1", folder({ f: randomBytes(1000) }), {});
    assert.equal((await waiting)?.id, "snap_p1");
    await repo.withdraw("snap_p1");
    assert.deepEqual(await other.announced(), []);
    await assert.rejects(repo.announce("../x", []), /invalid/);
  });

  test("a corrupted cache file is detected, dropped and fetched again; index survives a restart", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    const dir = fresh("cache");
    const repo = new ChunkRepository(b, testKey, { cache: new ChunkCache({ dir, maxBytes: 100 * MiB }) });
    const data = randomBytes(5 * MiB);
    const { manifest } = await repo.commit("snap_cc", folder({ f: data }), {});
    const sha = manifest.files[0]?.chunks[0]?.sha256 as string;
    const p = join(dir, sha.slice(0, 2), sha);
    const bytes = readFileSync(p);
    bytes[7] = (bytes[7] as number) ^ 1;
    writeFileSync(p, bytes);
    b.chunkGets = 0;
    const out = join(fresh("o"), "cc");
    await repo.materialize("snap_cc", out);
    assert.deepEqual(readFileSync(join(out, "f")), data);
    assert.equal(repo.metrics().corrupt, 1);
    assert.equal(b.chunkGets, 1);
    // a new process finds the cache as it was
    const again = new ChunkRepository(b, testKey, { cache: new ChunkCache({ dir, maxBytes: 100 * MiB }) });
    b.chunkGets = 0;
    await again.materialize("snap_cc", join(fresh("o"), "cc2"));
    assert.equal(b.chunkGets, 0);
  });
});
