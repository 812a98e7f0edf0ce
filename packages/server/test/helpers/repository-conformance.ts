/**
 * The snapshot repository's conformance suite over one backend (storage/repository/): the
 * folder backend runs it in the fast tier (repository.test.ts), S3 against a real S3 server on
 * loopback in the full suite (repository-s3-backend.test.ts).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { BackendError, type ObjectInfo } from "../../src/storage/repository/backend.js";
import { CDC_MAX } from "../../src/storage/repository/cdc.js";
import { ChunkRepository, type RepositoryOptions, runGc } from "../../src/storage/repository/chunk-repository.js";
import { CHUNK_BYTES, CHUNKS, chunkKey, LEASES, MANIFESTS } from "../../src/storage/repository/layout.js";
import type { PosixFsBackend } from "../../src/storage/repository/posix-fs-backend.js";
import {
  CorruptChunkError,
  MissingChunkError,
  SnapshotNotFoundError,
} from "../../src/storage/repository/repository.js";
import { S3Backend } from "../../src/storage/repository/s3-backend.js";
import { compress } from "../../src/storage/repository/zstd.js";
import {
  cdcPieces,
  digestsOf,
  distinctChunks,
  folder,
  fresh,
  type Kind,
  keys,
  MiB,
  newCache,
  refsOf,
  SpyBackend,
  seeded,
  sha256,
  sum,
  testKey,
} from "./repository-kit.js";

/** Declares the suite for `kind`. */
export function backendConformance(kind: Kind): void {
  describe(`${kind.name} backend`, () => {
    if (kind.name === "posix_fs") {
      test("objects and folders are readable by their owner only (manifests hold tokens, chunks memory)", async () => {
        const b = kind.make() as PosixFsBackend;
        await b.check();
        await b.put("manifests/m.json", Buffer.from("{}"));
        await b.putIfAbsent("claims/c.json", Buffer.from("{}"));
        for (const [p, mode] of [
          ["manifests/m.json", 0o600],
          ["claims/c.json", 0o600],
          ["manifests", 0o700],
          ["claims", 0o700],
        ] as const) {
          assert.equal(statSync(join(b.root, p)).mode & 0o777, mode, p);
        }
      });
    }

    test("putIfAbsent: of callers racing for one key exactly one wins, and the winner's body stays", async () => {
      const b = kind.make();
      await b.check();
      // s3rver ignores If-None-Match (AWS S3 and MinIO honour it): the backend must notice,
      // and then only sequential callers are guaranteed one winner.
      const racing = !(b instanceof S3Backend);
      const first = racing ? [] : [await b.putIfAbsent("claims/x.json", Buffer.from("w0"))];
      const wins = first.length
        ? first
        : await Promise.all(Array.from({ length: 8 }, (_, i) => b.putIfAbsent("claims/x.json", Buffer.from(`w${i}`))));
      if (b instanceof S3Backend)
        assert.equal(b.conditionalWrites, false, "s3rver's missing conditional writes detected");
      assert.equal(wins.filter(Boolean).length, 1, JSON.stringify(wins));
      assert.equal((await b.get("claims/x.json"))?.toString(), `w${wins.indexOf(true)}`);
      assert.equal(await b.putIfAbsent("claims/x.json", Buffer.from("late")), false);
      assert.deepEqual(await keys(b, "claims/"), ["claims/x.json"], "no temporary files left");
    });

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
      const repo = new ChunkRepository(kind.make(), testKey, { cache: newCache() });
      const big = seeded(9 * MiB, 1);
      const bigRefs = refsOf(big); // several content-defined chunks, all different
      assert.ok(bigRefs.length >= 3 && distinctChunks(big) === bigRefs.length, `${bigRefs.length} chunks`);
      const src = folder({ "pages.img": big, "checkpoint.img": Buffer.from("meta"), "empty.img": Buffer.alloc(0) });
      const { manifest, stats } = await repo.commit("sbx-a1", src, { note: "a" });
      assert.equal(stats.chunks, bigRefs.length + 1);
      assert.equal(stats.reused, 0);
      assert.equal(stats.uploadedChunks, bigRefs.length + 1);
      assert.equal(stats.bytes, 9 * MiB + 4);
      assert.equal(manifest.chunkSize, CHUNK_BYTES);
      assert.deepEqual(
        manifest.files.map((f) => [f.name, f.size, f.chunks]),
        [
          ["checkpoint.img", 4, [{ sha256: sha256(Buffer.from("meta")), size: 4 }]],
          ["empty.img", 0, []],
          ["pages.img", 9 * MiB, bigRefs],
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
      const repo = new ChunkRepository(b, testKey, { cache: newCache() });
      const block = seeded(4 * MiB, 2);
      const twice = Buffer.concat([block, block]);
      // Cut points follow content: the second copy of the block re-synchronises with the first
      // after the chunk that straddles the seam, so `twice` repeats chunks within itself, and
      // the file holding just the block is cut exactly like the first copy.
      const perFile = digestsOf(twice).length + digestsOf(block).length;
      const unique = distinctChunks(twice, block);
      assert.ok(new Set(digestsOf(twice)).size < digestsOf(twice).length, "twice repeats a chunk");
      assert.ok(
        digestsOf(block).every((d) => digestsOf(twice).includes(d)),
        "block's chunks are all in twice",
      );
      const s1 = await repo.commit("snap_1", folder({ a: twice, b: block }), {});
      assert.equal(s1.stats.chunks, perFile);
      assert.equal(s1.stats.uploadedChunks, unique);
      assert.equal(s1.stats.reused, perFile - unique);
      const s2 = await repo.commit("tmpl-base", folder({ c: block }), {});
      assert.equal(s2.stats.uploadedChunks, 0);
      assert.equal(s2.stats.uploadedBytes, 0);
      assert.equal((await keys(b, CHUNKS)).length, unique);
    });

    test("incremental: 24 MB folder, 1 MB changed in place or inserted mid-file → only the chunks around it uploaded", async () => {
      const repo = new ChunkRepository(kind.make(), testKey, { cache: newCache() });
      const data = seeded(24 * MiB, 3);
      const first = await repo.commit("sbx-inc", folder({ "pages.img": data }), {});
      const stored = new Set(digestsOf(data));
      assert.equal(first.stats.uploadedChunks, stored.size);
      assert.ok(stored.size > 12, `${stored.size} chunks`);
      const overwritten = Buffer.from(data);
      seeded(MiB, 4).copy(overwritten, 10 * MiB);
      // an insertion shifts the last 12 MiB: fixed-size chunks would all change
      const inserted = Buffer.concat([data.subarray(0, 12 * MiB), seeded(MiB, 5), data.subarray(12 * MiB)]);
      const edits: [string, string, Buffer][] = [
        ["snap_inc2", "1 MiB overwritten at 10 MiB", overwritten],
        ["snap_inc3", "1 MiB inserted at 12 MiB", inserted],
      ];
      for (const [id, edit, next] of edits) {
        const pieces = cdcPieces(next);
        const added = new Map(pieces.filter((p) => !stored.has(sha256(p))).map((p) => [sha256(p), p.length]));
        const addedBytes = sum([...added.values()]);
        const { stats } = await repo.commit(id, folder({ "pages.img": next }), {});
        assert.equal(stats.chunks, pieces.length, edit);
        assert.equal(stats.uploadedChunks, added.size, edit);
        assert.equal(stats.reused, pieces.length - added.size, edit);
        assert.ok(added.size >= 1, edit);
        // A 1 MiB edit re-uploads only the chunks around it: the one it starts in (which begins
        // less than CDC_MAX before it), those inside it, and the one after it in which the cut
        // points meet the old ones again (they do at the first cut past the edit, at most CDC_MAX
        // further). Hence at most 1 MiB + 2 * CDC_MAX = 9 MiB of a 24 MiB file, ~3 MiB on
        // average (1-4 chunks of ~1 MiB); the exact chunks are the ones cdc.ts says are new.
        // Uploaded bytes are zstd frames of incompressible data: raw size plus a little framing.
        const framed = (raw: number) => raw + raw / 1000 + 1024;
        assert.ok(stats.uploadedBytes >= addedBytes, `${edit}: ${stats.uploadedBytes}`);
        assert.ok(stats.uploadedBytes <= framed(addedBytes), `${edit}: ${stats.uploadedBytes} > ${addedBytes}`);
        assert.ok(stats.uploadedBytes <= framed(MiB + 2 * CDC_MAX), `${edit}: ${stats.uploadedBytes}`);
        const out = join(fresh("out"), id);
        await repo.materialize(id, out);
        assert.deepEqual(readFileSync(join(out, "pages.img")), next);
        for (const d of added.keys()) stored.add(d);
      }
    });

    test("cold cache fetches every chunk, warm cache fetches nothing", async () => {
      const b = new SpyBackend(kind.make());
      const writer = new ChunkRepository(b, testKey, { cache: newCache(), cacheOnCommit: false });
      const data = seeded(10 * MiB, 6);
      const n = distinctChunks(data);
      assert.ok(n >= 3, `${n} chunks`);
      await writer.commit("snap_cw", folder({ f: data }), {});
      const reader = new ChunkRepository(b, testKey, { cache: newCache() });
      b.chunkGets = 0;
      await reader.materialize("snap_cw", join(fresh("out"), "cold"));
      assert.equal(b.chunkGets, n);
      assert.equal(reader.metrics().misses, n);
      assert.ok(reader.metrics().bytesFetched > 10 * MiB);
      b.chunkGets = 0;
      const out = join(fresh("out"), "warm");
      await reader.materialize("snap_cw", out);
      assert.equal(b.chunkGets, 0);
      assert.equal(reader.metrics().hits, n);
      assert.deepEqual(readFileSync(join(out, "f")), data);
      // a commit with cacheOnCommit leaves the cache warm for a local restore
      const local = new ChunkRepository(b, testKey, { cache: newCache() });
      await local.commit("snap_cw2", folder({ f: randomBytes(5 * MiB) }), {});
      b.chunkGets = 0;
      await local.materialize("snap_cw2", join(fresh("out"), "local"));
      assert.equal(b.chunkGets, 0);
    });

    test("a corrupted chunk fails the materialize naming snapshot and chunk; no destination left", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, testKey, { cache: newCache() });
      const data = randomBytes(6 * MiB);
      const { manifest } = await repo.commit("snap_bad", folder({ f: data }), {});
      const sha = manifest.files[0]?.chunks[1]?.sha256 as string;
      const stored = (await b.get(chunkKey(sha))) as Buffer;
      const flipped = Buffer.from(stored);
      const mid = flipped.length >> 1; // inside the compressed payload
      flipped[mid] = (flipped[mid] as number) ^ 0xff;
      await b.put(chunkKey(sha), flipped);
      const reader = new ChunkRepository(b, testKey, { cache: newCache() });
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
      // a well-formed zstd frame of the wrong bytes, of the right size, is caught by the digest
      const size = manifest.files[0]?.chunks[1]?.size as number;
      await b.put(chunkKey(sha), await compress(randomBytes(size)));
      await assert.rejects(reader.materialize("snap_bad", out), /snap_bad.*digest mismatch/);
      // one of another size is refused before zstd runs
      await b.put(chunkKey(sha), await compress(randomBytes(2 * MiB)));
      await assert.rejects(reader.materialize("snap_bad", out), /snap_bad.*declares 2097152 bytes/);
      assert.deepEqual(readdirSync(outParent), []);
    });

    test("a missing chunk fails with MissingChunkError naming snapshot and chunk", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, testKey, { cache: newCache(), cacheOnCommit: false });
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
      const repo = new ChunkRepository(b, testKey, { cache: newCache() });
      const shared = seeded(4 * MiB, 7);
      const own = seeded(MiB, 8);
      await repo.commit("snap_keep", folder({ a: shared }), {});
      await repo.commit("snap_drop", folder({ a: shared, b: own }), {});
      const keep = new Set(digestsOf(shared));
      assert.deepEqual(await keys(b, CHUNKS), [...new Set([...keep, ...digestsOf(own)])].map(chunkKey).sort());
      await repo.delete("snap_drop");
      assert.equal(await repo.get("snap_drop"), undefined);
      assert.deepEqual(await keys(b, CHUNKS), [...keep].map(chunkKey).sort());
      await repo.materialize("snap_keep", join(fresh("out"), "k"));
      await repo.delete("snap_keep");
      assert.deepEqual(await keys(b, CHUNKS), []);
      assert.deepEqual(await keys(b, LEASES), []);
    });

    test("ids that could escape the layout are refused", async () => {
      const repo = new ChunkRepository(kind.make(), testKey);
      await assert.rejects(repo.commit("../evil", folder({ x: Buffer.from("x") }), {}));
      await assert.rejects(repo.commit(".hidden", folder({ x: Buffer.from("x") }), {}));
      assert.equal(await repo.get("a/b"), undefined);
    });

    test("two nodes committing the same chunks at once: both manifests valid, each chunk stored once", async () => {
      const b = kind.make();
      const nodeA = new ChunkRepository(b, testKey, { cache: newCache() });
      const nodeB = new ChunkRepository(b, testKey, { cache: newCache() });
      const data = seeded(16 * MiB, 9);
      const n = digestsOf(data).length;
      assert.equal(distinctChunks(data), n);
      const [ra, rb] = await Promise.all([
        nodeA.commit("snap_node_a", folder({ f: data }), { node: "a" }),
        nodeB.commit("snap_node_b", folder({ f: data }), { node: "b" }),
      ]);
      assert.equal(ra.stats.chunks, n);
      assert.equal(rb.stats.chunks, n);
      assert.deepEqual(await keys(b, CHUNKS), digestsOf(data).map(chunkKey).sort());
      const fresh1 = new ChunkRepository(b, testKey, { cache: newCache() });
      for (const id of ["snap_node_a", "snap_node_b"]) {
        const out = join(fresh("out"), id);
        await fresh1.materialize(id, out);
        assert.deepEqual(readFileSync(join(out, "f")), data);
      }
    });

    test("GC never deletes a chunk a commit in flight reuses (both interleavings)", async () => {
      const b = kind.make();
      const data = seeded(8 * MiB, 10);
      const n = distinctChunks(data);
      assert.ok(n >= 2, `${n} chunks`);
      const gate = () => {
        let open!: () => void;
        const p = new Promise<void>((r) => {
          open = r;
        });
        return { p, open };
      };
      const seed = new ChunkRepository(b, testKey, { gcOnDelete: false });
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
        const repo = new ChunkRepository(b, testKey, hooksOpts);
        await b.delete(`${MANIFESTS}snap_old.json`); // snap_old's chunks are now garbage
        const gc = repo.gc();
        await gcReachedLeases.p;
        const commit = repo.commit("snap_new", folder({ f: data }), {});
        await commitWaiting.p; // the commit saw the GC lock and holds off its existence checks
        gcPaused.open();
        const res = await gc;
        assert.equal(res.chunksDeleted, n);
        const { stats } = await commit;
        assert.equal(stats.uploadedChunks, n, "the commit re-uploads what the GC deleted");
        const out = join(fresh("out"), "new");
        await new ChunkRepository(b, testKey).materialize("snap_new", out);
        assert.deepEqual(readFileSync(join(out, "f")), data);
      }

      // (2) The commit checked existence (all present, so it will reuse them) before the GC
      // started: the GC must see its lease and keep those chunks.
      {
        const commitChecked = gate();
        const commitPaused = gate();
        const repo = new ChunkRepository(b, testKey, {
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
        const res = await runGc(new ChunkRepository(b, testKey));
        assert.equal(res.chunksDeleted, 0);
        assert.equal(res.chunksLive, n);
        assert.equal(res.leasesLive, 1);
        commitPaused.open();
        const { stats } = await commit;
        assert.equal(stats.uploadedChunks, 0);
        await new ChunkRepository(b, testKey).materialize("snap_newer", join(fresh("out"), "newer"));
        // Once committed, its manifest keeps them; the lease is gone.
        const again = await runGc(new ChunkRepository(b, testKey));
        assert.equal(again.chunksDeleted, 0);
        assert.equal(again.leasesLive, 0);
      }
    });

    test("GC: grace period, dry run, expired leases", async () => {
      const b = kind.make();
      const repo = new ChunkRepository(b, testKey, { gcOnDelete: false });
      const data = seeded(MiB, 11); // one or a few chunks: count them
      const n = distinctChunks(data);
      await repo.commit("snap_g", folder({ f: data }), {});
      await repo.delete("snap_g");
      const young = await repo.gc({ graceMs: 3_600_000 });
      assert.equal(young.chunksTooNew, n);
      assert.equal(young.chunksDeleted, 0);
      const dry = await repo.gc({ dryRun: true });
      assert.equal(dry.chunksDeleted, n);
      assert.equal((await keys(b, CHUNKS)).length, n);
      // a lease left by a crashed commit protects its chunks until it expires
      await b.put(`${LEASES}crashed.json`, Buffer.from(JSON.stringify({ id: "x", at: Date.now(), digests: [] })));
      await b.put(`${LEASES}old.json`, Buffer.from(JSON.stringify({ id: "y", at: 0, digests: [] })));
      const real = await repo.gc();
      assert.equal(real.chunksDeleted, n);
      assert.equal(real.expiredLeasesRemoved, 1);
      assert.deepEqual(await keys(b, LEASES), [`${LEASES}crashed.json`]);
      assert.deepEqual(await keys(b, CHUNKS), []);
    });
  });
}
