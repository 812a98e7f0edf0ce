/**
 * The snapshot repository (storage/repository/): one conformance suite run over both backends
 * (a folder, and a real S3 server on loopback), then cache, GC-race and fault tests.
 *
 *   node --import tsx --test packages/server/test/repository*.test.ts
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { after, before, describe, test } from "node:test";
import {
  BackendError,
  BackendUnavailableError,
  type ObjectInfo,
  type RepositoryBackend,
} from "../src/storage/repository/backend.js";
import { ChunkCache } from "../src/storage/repository/chunk-cache.js";
import { ChunkRepository, type RepositoryOptions, runGc } from "../src/storage/repository/chunk-repository.js";
import { CHUNK_BYTES, CHUNKS, chunkKey, LEASES, MANIFESTS } from "../src/storage/repository/layout.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import {
  CommitError,
  CorruptChunkError,
  MissingChunkError,
  SnapshotNotFoundError,
} from "../src/storage/repository/repository.js";
import { S3Backend } from "../src/storage/repository/s3-backend.js";
import { compress } from "../src/storage/repository/zstd.js";
import { startS3, type TestS3 } from "./helpers/s3.js";

const MiB = 1024 * 1024;
const root = mkdtempSync("/var/tmp/aenv-repo-test-");
after(() => rmSync(root, { recursive: true, force: true }));

let seq = 0;
const fresh = (name: string) => {
  const d = join(root, `${name}-${++seq}`);
  mkdirSync(d, { recursive: true });
  return d;
};

function folder(files: Record<string, Buffer>): string {
  const dir = fresh("src");
  for (const [f, data] of Object.entries(files)) writeFileSync(join(dir, f), data);
  return dir;
}

/** Wraps a backend to count chunk gets and to inject behaviour before puts. */
class SpyBackend implements RepositoryBackend {
  chunkGets = 0;
  puts = 0;
  beforePut?: (key: string) => Promise<void> | void;
  constructor(readonly inner: RepositoryBackend) {}
  get description() {
    return this.inner.description;
  }
  async put(key: string, body: Uint8Array | Readable) {
    this.puts++;
    await this.beforePut?.(key);
    return this.inner.put(key, body);
  }
  get(key: string) {
    if (key.startsWith(CHUNKS)) this.chunkGets++;
    return this.inner.get(key);
  }
  head(key: string) {
    return this.inner.head(key);
  }
  list(prefix: string) {
    return this.inner.list(prefix);
  }
  delete(key: string) {
    return this.inner.delete(key);
  }
  check() {
    return this.inner.check();
  }
}

async function keys(b: RepositoryBackend, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const o of b.list(prefix)) out.push(o.key);
  return out.sort();
}

const newCache = (maxBytes = 1024 * MiB) => new ChunkCache({ dir: fresh("cache"), maxBytes });

interface Kind {
  name: string;
  /** A fresh, empty backend. */
  make(): RepositoryBackend;
}

let s3: TestS3;
before(async () => {
  s3 = await startS3();
});
after(async () => {
  await s3?.close();
});

const kinds: Kind[] = [
  { name: "posix_fs", make: () => new PosixFsBackend(fresh("repo")) },
  { name: "s3", make: () => new S3Backend(s3.backendOptions(`t${++seq}/repo`)) },
];

for (const kind of kinds) {
  describe(`${kind.name} backend`, () => {
    test("put/get/head/list/delete; missing keys are undefined; invalid keys refused", async () => {
      const b = kind.make();
      await b.check();
      assert.equal(await b.get("a/missing"), undefined);
      assert.equal(await b.head("a/missing"), undefined);
      await b.put("a/b/one", Buffer.from("1"));
      await b.put("a/two", Buffer.from("22"));
      await b.put("c/three", Buffer.from("333"));
      await b.put("a/two", Buffer.from("2222")); // overwrite
      assert.equal((await b.get("a/two"))?.toString(), "2222");
      const h = (await b.head("a/b/one")) as ObjectInfo;
      assert.equal(h.size, 1);
      assert.ok(Math.abs(h.modified.getTime() - Date.now()) < 60_000);
      assert.deepEqual(await keys(b, "a/"), ["a/b/one", "a/two"]);
      assert.deepEqual(await keys(b, "c/"), ["c/three"]);
      await b.delete("a/two");
      await b.delete("a/two"); // missing is fine
      assert.deepEqual(await keys(b, "a/"), ["a/b/one"]);
      await assert.rejects(b.put("../escape", Buffer.from("x")), BackendError);
      await assert.rejects(b.get("a/../../x"), BackendError);
    });

    test("a 12 MiB object round-trips (multipart on s3)", async () => {
      const b = kind.make();
      const big = randomBytes(12 * MiB);
      await b.put("big/object", big);
      assert.deepEqual(await b.get("big/object"), big);
    });

    test("commit + materialize rebuild files byte for byte; stats; meta; empty files", async () => {
      const repo = new ChunkRepository(kind.make(), { cache: newCache() });
      const big = randomBytes(9 * MiB); // 3 chunks
      const src = folder({ "pages.img": big, "checkpoint.img": Buffer.from("meta"), "empty.img": Buffer.alloc(0) });
      const { manifest, stats } = await repo.commit("sbx-a1", src, { note: "a" });
      assert.equal(stats.chunks, 4);
      assert.equal(stats.reused, 0);
      assert.equal(stats.uploadedChunks, 4);
      assert.equal(stats.bytes, 9 * MiB + 4);
      assert.deepEqual(
        manifest.files.map((f) => [f.name, f.size, f.chunks.length]),
        [
          ["checkpoint.img", 4, 1],
          ["empty.img", 0, 0],
          ["pages.img", 9 * MiB, 3],
        ],
      );
      const out = join(fresh("out"), "snap");
      await repo.materialize("sbx-a1", out);
      assert.deepEqual(readFileSync(join(out, "pages.img")), big);
      assert.equal(readFileSync(join(out, "checkpoint.img")).toString(), "meta");
      assert.equal(readFileSync(join(out, "empty.img")).length, 0);
      assert.deepEqual((await repo.get("sbx-a1"))?.meta, { note: "a" });
      assert.deepEqual(
        (await repo.list()).map((m) => m.id),
        ["sbx-a1"],
      );
      // materialize into an existing empty folder works too; into a non-empty one it refuses
      const empty = fresh("out-empty");
      await repo.materialize("sbx-a1", empty);
      assert.ok(existsSync(join(empty, "pages.img")));
      await assert.rejects(repo.materialize("sbx-a1", empty));
      await assert.rejects(repo.materialize("nope", join(fresh("o"), "x")), SnapshotNotFoundError);
    });

    test("identical content is stored once (dedup across snapshots and within one)", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, { cache: newCache() });
      const block = randomBytes(4 * MiB);
      const twice = Buffer.concat([block, block]);
      const s1 = await repo.commit("snap_1", folder({ a: twice, b: block }), {});
      assert.equal(s1.stats.chunks, 3);
      assert.equal(s1.stats.uploadedChunks, 1);
      const s2 = await repo.commit("tmpl-base", folder({ c: block }), {});
      assert.equal(s2.stats.uploadedChunks, 0);
      assert.equal(s2.stats.uploadedBytes, 0);
      assert.equal((await keys(b, CHUNKS)).length, 1);
    });

    test("incremental: 50 MB folder, 1 MB changed → about one chunk uploaded", async () => {
      const repo = new ChunkRepository(kind.make(), { cache: newCache() });
      const data = randomBytes(50 * MiB);
      const first = await repo.commit("sbx-inc", folder({ "pages.img": data }), {});
      assert.equal(first.stats.uploadedChunks, 13);
      randomBytes(MiB).copy(data, 20 * MiB); // 1 MiB inside chunk 5
      const second = await repo.commit("snap_inc2", folder({ "pages.img": data }), {});
      assert.equal(second.stats.uploadedChunks, 1);
      assert.equal(second.stats.reused, 12);
      assert.ok(second.stats.uploadedBytes < 4.1 * MiB, `${second.stats.uploadedBytes}`);
      assert.ok(second.stats.uploadedBytes > 0);
      const out = join(fresh("out"), "inc");
      await repo.materialize("snap_inc2", out);
      assert.deepEqual(readFileSync(join(out, "pages.img")), data);
    });

    test("cold cache fetches every chunk, warm cache fetches nothing", async () => {
      const b = new SpyBackend(kind.make());
      const writer = new ChunkRepository(b, { cache: newCache(), cacheOnCommit: false });
      const data = randomBytes(10 * MiB);
      await writer.commit("snap_cw", folder({ f: data }), {});
      const reader = new ChunkRepository(b, { cache: newCache() });
      b.chunkGets = 0;
      await reader.materialize("snap_cw", join(fresh("out"), "cold"));
      assert.equal(b.chunkGets, 3);
      assert.equal(reader.metrics().misses, 3);
      assert.ok(reader.metrics().bytesFetched > 10 * MiB);
      b.chunkGets = 0;
      const out = join(fresh("out"), "warm");
      await reader.materialize("snap_cw", out);
      assert.equal(b.chunkGets, 0);
      assert.equal(reader.metrics().hits, 3);
      assert.deepEqual(readFileSync(join(out, "f")), data);
      // a commit with cacheOnCommit leaves the cache warm for a local restore
      const local = new ChunkRepository(b, { cache: newCache() });
      await local.commit("snap_cw2", folder({ f: randomBytes(5 * MiB) }), {});
      b.chunkGets = 0;
      await local.materialize("snap_cw2", join(fresh("out"), "local"));
      assert.equal(b.chunkGets, 0);
    });

    test("a corrupted chunk fails the materialize naming snapshot and chunk; no destination left", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, { cache: newCache() });
      const data = randomBytes(6 * MiB);
      const { manifest } = await repo.commit("snap_bad", folder({ f: data }), {});
      const sha = manifest.files[0]?.chunks[1]?.sha256 as string;
      const stored = (await b.get(chunkKey(sha))) as Buffer;
      const flipped = Buffer.from(stored);
      flipped[flipped.length >> 1] ^= 0xff; // inside the compressed payload
      await b.put(chunkKey(sha), flipped);
      const reader = new ChunkRepository(b, { cache: newCache() });
      const outParent = fresh("out");
      const out = join(outParent, "bad");
      const err = await reader.materialize("snap_bad", out).then(
        () => assert.fail("materialize succeeded"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof CorruptChunkError, String(err));
      assert.match(err.message, /snap_bad/);
      assert.match(err.message, new RegExp(sha));
      assert.deepEqual(readdirSync(outParent), []);
      // a well-formed zstd frame of the wrong bytes is caught by the digest
      await b.put(chunkKey(sha), await compress(randomBytes(2 * MiB)));
      await assert.rejects(reader.materialize("snap_bad", out), /snap_bad.*digest mismatch|snap_bad.*bytes instead/);
      assert.deepEqual(readdirSync(outParent), []);
    });

    test("a missing chunk fails with MissingChunkError naming snapshot and chunk", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, { cache: newCache(), cacheOnCommit: false });
      const { manifest } = await repo.commit("snap_gone", folder({ f: randomBytes(5 * MiB) }), {});
      const sha = manifest.files[0]?.chunks[0]?.sha256 as string;
      await b.delete(chunkKey(sha));
      const outParent = fresh("out");
      await assert.rejects(repo.materialize("snap_gone", join(outParent, "x")), (e: unknown) => {
        assert.ok(e instanceof MissingChunkError);
        assert.match(e.message, /snap_gone/);
        assert.match(e.message, new RegExp(sha));
        return true;
      });
      assert.deepEqual(readdirSync(outParent), []);
    });

    test("delete removes the manifest and only the chunks nobody else references", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, { cache: newCache() });
      const shared = randomBytes(4 * MiB);
      await repo.commit("snap_keep", folder({ a: shared }), {});
      await repo.commit("snap_drop", folder({ a: shared, b: randomBytes(MiB) }), {});
      assert.equal((await keys(b, CHUNKS)).length, 2);
      await repo.delete("snap_drop");
      assert.equal(await repo.get("snap_drop"), undefined);
      assert.equal((await keys(b, CHUNKS)).length, 1);
      await repo.materialize("snap_keep", join(fresh("out"), "k"));
      await repo.delete("snap_keep");
      assert.deepEqual(await keys(b, CHUNKS), []);
      assert.deepEqual(await keys(b, LEASES), []);
    });

    test("ids that could escape the layout are refused", async () => {
      const repo = new ChunkRepository(kind.make());
      await assert.rejects(repo.commit("../evil", folder({ x: Buffer.from("x") }), {}));
      await assert.rejects(repo.commit(".hidden", folder({ x: Buffer.from("x") }), {}));
      assert.equal(await repo.get("a/b"), undefined);
    });

    test("two nodes committing the same chunks at once: both manifests valid, each chunk stored once", async () => {
      const b = kind.make();
      const nodeA = new ChunkRepository(b, { cache: newCache() });
      const nodeB = new ChunkRepository(b, { cache: newCache() });
      const data = randomBytes(16 * MiB);
      const [ra, rb] = await Promise.all([
        nodeA.commit("snap_node_a", folder({ f: data }), { node: "a" }),
        nodeB.commit("snap_node_b", folder({ f: data }), { node: "b" }),
      ]);
      assert.equal(ra.stats.chunks, 4);
      assert.equal(rb.stats.chunks, 4);
      assert.equal((await keys(b, CHUNKS)).length, 4);
      const fresh1 = new ChunkRepository(b, { cache: newCache() });
      for (const id of ["snap_node_a", "snap_node_b"]) {
        const out = join(fresh("out"), id);
        await fresh1.materialize(id, out);
        assert.deepEqual(readFileSync(join(out, "f")), data);
      }
    });

    test("GC never deletes a chunk a commit in flight reuses (both interleavings)", async () => {
      const b = kind.make();
      const data = randomBytes(8 * MiB);
      const gate = () => {
        let open!: () => void;
        const p = new Promise<void>((r) => {
          open = r;
        });
        return { p, open };
      };
      const seed = new ChunkRepository(b, { gcOnDelete: false });
      await seed.commit("snap_old", folder({ f: data }), {});

      // (1) The GC read the leases before the commit wrote its lease: the commit must see the
      // GC's lock and wait, so it learns the chunks are gone and uploads them again.
      {
        const gcPaused = gate();
        const gcReachedLeases = gate();
        const commitWaiting = gate();
        const hooksOpts: RepositoryOptions = {
          gcPollMs: 20,
          hooks: {
            gcAfterLeases: async () => {
              gcReachedLeases.open();
              await gcPaused.p;
            },
            waitingForGc: () => commitWaiting.open(),
          },
        };
        const repo = new ChunkRepository(b, hooksOpts);
        await b.delete(`${MANIFESTS}snap_old.json`); // snap_old's chunks are now garbage
        const gc = repo.gc();
        await gcReachedLeases.p;
        const commit = repo.commit("snap_new", folder({ f: data }), {});
        await commitWaiting.p; // the commit saw the GC lock and holds off its existence checks
        gcPaused.open();
        const res = await gc;
        assert.equal(res.chunksDeleted, 2);
        const { stats } = await commit;
        assert.equal(stats.uploadedChunks, 2, "the commit re-uploads what the GC deleted");
        const out = join(fresh("out"), "new");
        await new ChunkRepository(b).materialize("snap_new", out);
        assert.deepEqual(readFileSync(join(out, "f")), data);
      }

      // (2) The commit checked existence (all present, so it will reuse them) before the GC
      // started: the GC must see its lease and keep those chunks.
      {
        const commitChecked = gate();
        const commitPaused = gate();
        const repo = new ChunkRepository(b, {
          hooks: {
            afterExistenceCheck: async (_id, missing) => {
              assert.equal(missing.length, 0);
              commitChecked.open();
              await commitPaused.p;
            },
          },
        });
        const commit = repo.commit("snap_newer", folder({ f: data }), {});
        await commitChecked.p;
        await b.delete(`${MANIFESTS}snap_new.json`); // the only manifest referencing the chunks
        const res = await runGc(new ChunkRepository(b));
        assert.equal(res.chunksDeleted, 0);
        assert.equal(res.chunksLive, 2);
        assert.equal(res.leasesLive, 1);
        commitPaused.open();
        const { stats } = await commit;
        assert.equal(stats.uploadedChunks, 0);
        await new ChunkRepository(b).materialize("snap_newer", join(fresh("out"), "newer"));
        // Once committed, its manifest keeps them; the lease is gone.
        const again = await runGc(new ChunkRepository(b));
        assert.equal(again.chunksDeleted, 0);
        assert.equal(again.leasesLive, 0);
      }
    });

    test("GC: grace period, dry run, expired leases", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, { gcOnDelete: false });
      await repo.commit("snap_g", folder({ f: randomBytes(MiB) }), {});
      await repo.delete("snap_g");
      const young = await repo.gc({ graceMs: 3_600_000 });
      assert.equal(young.chunksTooNew, 1);
      assert.equal(young.chunksDeleted, 0);
      const dry = await repo.gc({ dryRun: true });
      assert.equal(dry.chunksDeleted, 1);
      assert.equal((await keys(b, CHUNKS)).length, 1);
      // a lease left by a crashed commit protects its chunks until it expires
      await b.put(`${LEASES}crashed.json`, Buffer.from(JSON.stringify({ id: "x", at: Date.now(), digests: [] })));
      await b.put(`${LEASES}old.json`, Buffer.from(JSON.stringify({ id: "y", at: 0, digests: [] })));
      const real = await repo.gc();
      assert.equal(real.chunksDeleted, 1);
      assert.equal(real.expiredLeasesRemoved, 1);
      assert.deepEqual(await keys(b, LEASES), [`${LEASES}crashed.json`]);
      assert.deepEqual(await keys(b, CHUNKS), []);
    });
  });
}

describe("node-local chunk cache", () => {
  test("LRU eviction within the byte bound; pinned chunks are never evicted", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    const writer = new ChunkRepository(b, { cacheOnCommit: false });
    const a = randomBytes(4 * MiB);
    const c = randomBytes(4 * MiB);
    const d = randomBytes(4 * MiB);
    await writer.commit("snap_a", folder({ f: a }), {});
    await writer.commit("snap_c", folder({ f: c }), {});
    await writer.commit("snap_d", folder({ f: d }), {});
    const cache = newCache(9 * MiB); // room for two chunks
    const repo = new ChunkRepository(b, { cache });
    assert.equal(await repo.pin("snap_a"), true);
    await repo.materialize("snap_a", join(fresh("o"), "a"));
    await repo.materialize("snap_c", join(fresh("o"), "c"));
    await repo.materialize("snap_d", join(fresh("o"), "d")); // evicts c (a is pinned)
    assert.ok(cache.usedBytes <= 9 * MiB);
    assert.equal(repo.metrics().evictions, 1);
    b.chunkGets = 0;
    await repo.materialize("snap_a", join(fresh("o"), "a2"));
    await repo.materialize("snap_d", join(fresh("o"), "d2"));
    assert.equal(b.chunkGets, 0);
    await repo.materialize("snap_c", join(fresh("o"), "c2"));
    assert.equal(b.chunkGets, 1);
    // a cache full of pinned chunks still serves reads, straight through (bypassed)
    await repo.pin("snap_c");
    assert.equal(
      cache.isPinned(d.length ? ((await repo.get("snap_d"))?.files[0]?.chunks[0]?.sha256 ?? "") : ""),
      false,
    );
    await repo.pin("snap_d");
    const before = repo.metrics().bypassed;
    b.chunkGets = 0;
    const x = randomBytes(3 * MiB);
    await writer.commit("snap_x", folder({ f: x }), {});
    const out = join(fresh("o"), "x");
    await repo.materialize("snap_x", out);
    assert.deepEqual(readFileSync(join(out, "f")), x);
    assert.equal(repo.metrics().bypassed, before + 1);
    assert.ok(cache.usedBytes <= 9 * MiB);
    // unpinning makes room again
    repo.unpin("snap_a");
    repo.unpin("snap_c");
    repo.unpin("snap_d");
    await repo.materialize("snap_x", join(fresh("o"), "x2"));
    assert.equal(cache.has((await repo.get("snap_x"))?.files[0]?.chunks[0]?.sha256 as string), true);
  });

  test("concurrent materializes of one snapshot fetch each chunk once (coalesced)", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    await new ChunkRepository(b, { cacheOnCommit: false }).commit("snap_co", folder({ f: randomBytes(12 * MiB) }), {});
    const repo = new ChunkRepository(b, { cache: newCache() });
    b.chunkGets = 0;
    await Promise.all(Array.from({ length: 5 }, (_, i) => repo.materialize("snap_co", join(fresh("o"), `c${i}`))));
    assert.equal(b.chunkGets, 3);
    assert.equal(repo.metrics().backendGets, 3);
    assert.ok(repo.metrics().coalesced + repo.metrics().hits >= 12);
  });

  test("a corrupted cache file is detected, dropped and fetched again; index survives a restart", async () => {
    const b = new SpyBackend(new PosixFsBackend(fresh("repo")));
    const dir = fresh("cache");
    const repo = new ChunkRepository(b, { cache: new ChunkCache({ dir, maxBytes: 100 * MiB }) });
    const data = randomBytes(5 * MiB);
    const { manifest } = await repo.commit("snap_cc", folder({ f: data }), {});
    const sha = manifest.files[0]?.chunks[0]?.sha256 as string;
    const p = join(dir, sha.slice(0, 2), sha);
    const bytes = readFileSync(p);
    bytes[7] ^= 1;
    writeFileSync(p, bytes);
    b.chunkGets = 0;
    const out = join(fresh("o"), "cc");
    await repo.materialize("snap_cc", out);
    assert.deepEqual(readFileSync(join(out, "f")), data);
    assert.equal(repo.metrics().corrupt, 1);
    assert.equal(b.chunkGets, 1);
    // a new process finds the cache as it was
    const again = new ChunkRepository(b, { cache: new ChunkCache({ dir, maxBytes: 100 * MiB }) });
    b.chunkGets = 0;
    await again.materialize("snap_cc", join(fresh("o"), "cc2"));
    assert.equal(b.chunkGets, 0);
  });
});

describe("faults and start-up checks", () => {
  test("s3 stopped mid-upload: the commit fails clearly, nothing is visible, the retry succeeds", async () => {
    const b = new SpyBackend(new S3Backend(s3.backendOptions(`t${++seq}/fault`)));
    const repo = new ChunkRepository(b, { cache: newCache(), concurrency: 2 });
    const data = randomBytes(40 * MiB);
    const src = folder({ "pages.img": data });
    let chunkPuts = 0;
    b.beforePut = async (key) => {
      if (key.startsWith(CHUNKS) && ++chunkPuts === 4) await s3.stop();
    };
    const err = await repo.commit("sbx-fault", src, {}).then(
      () => assert.fail("commit succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof CommitError, String(err));
    assert.match(err.message, /^commit of 'sbx-fault' failed: s3 .*chunks\/.*(ECONNREFUSED|socket|connect)/);
    await s3.restart();
    b.beforePut = undefined;
    assert.equal(await repo.get("sbx-fault"), undefined);
    assert.deepEqual(
      (await repo.list()).map((m) => m.id),
      [],
    );
    const { stats } = await repo.commit("sbx-fault", src, {});
    assert.ok(stats.uploadedChunks < 10, `${stats.uploadedChunks} chunks re-uploaded`);
    const out = join(fresh("o"), "fault");
    await new ChunkRepository(b).materialize("sbx-fault", out);
    assert.deepEqual(readFileSync(join(out, "pages.img")), data);
  });

  test("s3 check: missing bucket, unreachable endpoint, missing region, each one line", async () => {
    const noBucket = new S3Backend({ ...s3.backendOptions(), bucket: "no-such-bucket" });
    await assert.rejects(noBucket.check(), (e: unknown) => {
      assert.ok(e instanceof BackendUnavailableError);
      assert.match(e.message, /no-such-bucket.*does not exist/);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
    const dead = new S3Backend({ ...s3.backendOptions(), endpoint: "http://127.0.0.1:1", maxAttempts: 1 });
    await assert.rejects(dead.check(), (e: unknown) => {
      assert.ok(e instanceof BackendUnavailableError);
      assert.match(e.message, /unreachable.*ECONNREFUSED/);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
    assert.throws(() => new S3Backend({ ...s3.backendOptions(), region: "" }), /region is required/);
  });

  test("posix_fs check: a repository path that cannot be created fails with one line", async () => {
    const file = join(fresh("x"), "file");
    writeFileSync(file, "x");
    const b = new PosixFsBackend(join(file, "repo"));
    await assert.rejects(b.check(), (e: unknown) => {
      assert.ok(e instanceof BackendUnavailableError);
      assert.match(e.message, /not writable.*ENOTDIR/);
      return true;
    });
  });

  test("chunk keys and sizes: files are cut at exactly CHUNK_BYTES", async () => {
    const b = new PosixFsBackend(fresh("repo"));
    const repo = new ChunkRepository(b);
    const { manifest } = await repo.commit("snap_sz", folder({ f: randomBytes(CHUNK_BYTES + 1) }), {});
    assert.deepEqual(
      manifest.files[0]?.chunks.map((c) => c.size),
      [CHUNK_BYTES, 1],
    );
  });
});
