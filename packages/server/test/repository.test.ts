/**
 * The snapshot repository (storage/repository/): one conformance suite run over both backends
 * (a folder, and a real S3 server on loopback), then cache, GC-race and fault tests.
 *
 *   node --import tsx --test packages/server/test/repository*.test.ts
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { after, before, describe, test } from "node:test";
import {
  BackendError,
  BackendUnavailableError,
  type ObjectInfo,
  type RepositoryBackend,
} from "../src/storage/repository/backend.js";
import { CDC_MAX, CDC_MIN, chunksOf, nextCut } from "../src/storage/repository/cdc.js";
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
import { RepositoryKey } from "../src/storage/repository/signing.js";
import { compress } from "../src/storage/repository/zstd.js";
import { startS3, type TestS3 } from "./helpers/s3.js";

const MiB = 1024 * 1024;
/** Stands in for the cluster key (AENV_REPOSITORY_KEY). */
const testKey = new RepositoryKey("test repository key 0123456789abcdef");
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

/**
 * Deterministic pseudo-random bytes (xorshift32): the same seed gives the same bytes, hence the
 * same content-defined cut points, on every run. zstd cannot compress them.
 */
function seeded(n: number, seed: number): Buffer {
  const words = new Uint32Array(Math.ceil(n / 4));
  let x = Math.imul(seed + 1, 0x9e3779b9) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  return Buffer.from(words.buffer, 0, n);
}

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

/** The chunks a commit must cut `data` into, from cdc.ts's cut points (not from offsets). */
function cdcPieces(data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let off = 0; off < data.length; ) {
    const n = nextCut(data.subarray(off));
    out.push(data.subarray(off, off + n));
    off += n;
  }
  return out;
}

/** Chunk refs as a manifest lists them for a file holding `data`. */
const refsOf = (data: Buffer) => cdcPieces(data).map((p) => ({ sha256: sha256(p), size: p.length }));
const digestsOf = (data: Buffer) => cdcPieces(data).map(sha256);
/** How many distinct chunks (objects in the repository) these files need. */
const distinctChunks = (...files: Buffer[]) => new Set(files.flatMap(digestsOf)).size;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** Wraps a backend to count chunk gets and to inject behaviour before puts. */
class SpyBackend implements RepositoryBackend {
  chunkGets = 0;
  puts = 0;
  lists = 0;
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
  putIfAbsent(key: string, body: Uint8Array) {
    return this.inner.putIfAbsent(key, body);
  }
  get(key: string) {
    if (key.startsWith(CHUNKS)) this.chunkGets++;
    return this.inner.get(key);
  }
  head(key: string) {
    return this.inner.head(key);
  }
  list(prefix: string) {
    this.lists++;
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

    test("incremental: 50 MB folder, 1 MB changed in place or inserted mid-file → only the chunks around it uploaded", async () => {
      const repo = new ChunkRepository(kind.make(), testKey, { cache: newCache() });
      const data = seeded(50 * MiB, 3);
      const first = await repo.commit("sbx-inc", folder({ "pages.img": data }), {});
      const stored = new Set(digestsOf(data));
      assert.equal(first.stats.uploadedChunks, stored.size);
      assert.ok(stored.size > 30, `${stored.size} chunks`);
      const overwritten = Buffer.from(data);
      seeded(MiB, 4).copy(overwritten, 20 * MiB);
      // an insertion shifts the last 25 MiB: fixed-size chunks would all change
      const inserted = Buffer.concat([data.subarray(0, 25 * MiB), seeded(MiB, 5), data.subarray(25 * MiB)]);
      const edits: [string, string, Buffer][] = [
        ["snap_inc2", "1 MiB overwritten at 20 MiB", overwritten],
        ["snap_inc3", "1 MiB inserted at 25 MiB", inserted],
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
        // further). Hence at most 1 MiB + 2 * CDC_MAX = 9 MiB of a 50 MiB file, ~3 MiB on
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
      // a well-formed zstd frame of the wrong bytes is caught by the digest
      await b.put(chunkKey(sha), await compress(randomBytes(2 * MiB)));
      await assert.rejects(reader.materialize("snap_bad", out), /snap_bad.*digest mismatch|snap_bad.*bytes instead/);
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

describe("faults and start-up checks", () => {
  test("s3 stopped mid-upload: the commit fails clearly, nothing is visible, the retry succeeds", async () => {
    const b = new SpyBackend(new S3Backend(s3.backendOptions(`t${++seq}/fault`)));
    const repo = new ChunkRepository(b, testKey, { cache: newCache(), concurrency: 2 });
    const data = seeded(40 * MiB, 16);
    const n = distinctChunks(data);
    assert.ok(n >= 10, `${n} chunks`);
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
    // With two uploads at a time, the 4th chunk put starts only after two others finished:
    // those are stored, and the retry reuses them.
    assert.equal(stats.chunks, n);
    assert.ok(
      stats.uploadedChunks >= 1 && stats.uploadedChunks <= n - 2,
      `${stats.uploadedChunks} of ${n} re-uploaded`,
    );
    assert.equal(stats.reused, n - stats.uploadedChunks);
    const out = join(fresh("o"), "fault");
    await new ChunkRepository(b, testKey).materialize("sbx-fault", out);
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
});

describe("content-defined chunking (cdc.ts)", () => {
  /** Sizes chunksOf yields for `data` read from a file (it reads 8 MiB at a time). */
  const fileChunks = async (data: Buffer): Promise<Buffer[]> => {
    const path = join(fresh("cdc"), "f");
    writeFileSync(path, data);
    const fh = await open(path, "r");
    try {
      const out: Buffer[] = [];
      for await (const chunk of chunksOf(fh)) out.push(chunk);
      return out;
    } finally {
      await fh.close();
    }
  };
  const sizes = (pieces: Buffer[]) => pieces.map((p) => p.length);

  test("cut points depend only on the bytes; chunks within bounds; files rebuild from them", async () => {
    const data = seeded(20 * MiB, 17);
    const pieces = await fileChunks(data);
    assert.deepEqual(Buffer.concat(pieces), data);
    // same cuts whether read from a file in 8 MiB blocks or cut from memory, and for a copy
    assert.deepEqual(sizes(pieces), sizes(cdcPieces(data)));
    assert.deepEqual(sizes(await fileChunks(Buffer.from(data))), sizes(pieces));
    assert.ok(pieces.length >= (20 * MiB) / CDC_MAX, `${pieces.length} chunks`);
    for (const [i, p] of pieces.entries()) {
      assert.ok(p.length <= CDC_MAX, `chunk ${i}: ${p.length}`);
      if (i < pieces.length - 1) assert.ok(p.length > CDC_MIN, `chunk ${i}: ${p.length}`);
    }
    // not fixed-size: cuts fall where the content says, so sizes vary
    assert.ok(new Set(sizes(pieces)).size > pieces.length / 2);
    // the repository stores exactly these chunks, each under the key of its digest
    const b = new PosixFsBackend(fresh("repo"));
    const { manifest } = await new ChunkRepository(b, testKey).commit("snap_sz", folder({ f: data }), {});
    assert.deepEqual(manifest.files[0]?.chunks, refsOf(data));
    assert.deepEqual(await keys(b, CHUNKS), [...new Set(pieces.map(sha256))].map(chunkKey).sort());
  });

  test("shift resistance: bytes inserted or removed near the start leave later chunks unchanged", async () => {
    const data = seeded(32 * MiB, 18);
    const base = digestsOf(data);
    const edits: [string, Buffer][] = [
      ["100 bytes inserted at 1000", Buffer.concat([data.subarray(0, 1000), seeded(100, 19), data.subarray(1000)])],
      ["1 byte removed at 5000", Buffer.concat([data.subarray(0, 5000), data.subarray(5001)])],
      ["4 KiB prepended", Buffer.concat([seeded(4096, 20), data])],
    ];
    for (const [what, edited] of edits) {
      const kept = new Set(digestsOf(edited));
      const lost = base.filter((d) => !kept.has(d)).length;
      // only the chunk(s) holding the edit change; everything after re-synchronises
      assert.ok(lost <= 2, `${what}: ${lost} of ${base.length} chunks changed`);
    }
    // fixed 4 MiB chunks would have shared nothing after the first edit
    const fixed = (b: Buffer) =>
      Array.from({ length: Math.ceil(b.length / CDC_MAX) }, (_, i) =>
        sha256(b.subarray(i * CDC_MAX, (i + 1) * CDC_MAX)),
      );
    const shifted = new Set(fixed(edits[0]?.[1] as Buffer));
    assert.equal(fixed(data).filter((d) => shifted.has(d)).length, 0);
  });

  test("a run of zeros, tiny files and an empty file", async () => {
    // zeros: no cut point in the content, so max-size chunks, all the same chunk
    const zeros = Buffer.alloc(20 * MiB);
    const zp = await fileChunks(zeros);
    assert.deepEqual(Buffer.concat(zp), zeros);
    assert.ok(zp.every((p) => p.length <= CDC_MAX));
    assert.ok(zp.slice(0, -1).every((p) => p.length > CDC_MIN));
    assert.ok(new Set(zp.map(sha256)).size <= 2, "a run of zeros repeats one chunk");
    const b = new PosixFsBackend(fresh("repo"));
    const repo = new ChunkRepository(b, testKey);
    const { stats } = await repo.commit("snap_zero", folder({ z: zeros }), {});
    assert.ok(stats.uploadedChunks <= 2, `${stats.uploadedChunks}`);
    assert.ok(stats.uploadedBytes < 64 * 1024, `${stats.uploadedBytes}`);
    // small files are one chunk, an empty file none
    for (const n of [1, 100, CDC_MIN - 1, CDC_MIN, CDC_MIN + 1]) {
      const small = seeded(n, n);
      assert.equal(nextCut(small), n);
      assert.deepEqual(await fileChunks(small), [small]);
    }
    assert.equal(nextCut(new Uint8Array(0)), 0);
    assert.deepEqual(await fileChunks(Buffer.alloc(0)), []);
    const { manifest } = await repo.commit("snap_small", folder({ one: Buffer.from("x"), empty: Buffer.alloc(0) }), {});
    assert.deepEqual(
      manifest.files.map((f) => [f.name, f.size, f.chunks]),
      [
        ["empty", 0, []],
        ["one", 1, [{ sha256: sha256(Buffer.from("x")), size: 1 }]],
      ],
    );
    const out = join(fresh("o"), "small");
    await repo.materialize("snap_small", out);
    assert.equal(readFileSync(join(out, "one")).toString(), "x");
    assert.equal(readFileSync(join(out, "empty")).length, 0);
    const zout = join(fresh("o"), "zero");
    await repo.materialize("snap_zero", zout);
    assert.deepEqual(readFileSync(join(zout, "z")), zeros);
  });
});
