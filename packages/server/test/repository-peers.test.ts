/**
 * Snapshot chunks from the cluster's other nodes (cluster.p2p) before the repository: a node
 * restores a manifest whose chunks left the repository from a peer's cache; a chunk a peer
 * sends wrong is refused and read from the next holder or the repository; a lookup that fails
 * leaves the repository to serve it all. The peer seam here asks the other repository object
 * what the node route asks it; test/images-p2p.test.ts runs the same over real nodes.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { ChunkPeers } from "../src/storage/repository/chunk-peers.js";
import { ChunkRepository } from "../src/storage/repository/chunk-repository.js";
import { chunkKey } from "../src/storage/repository/layout.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import type { ChunkHolder } from "../src/storage/repository/repository.js";
import {
  cdcPieces,
  digestsOf,
  folder,
  fresh,
  MiB,
  newCache,
  SpyBackend,
  seeded,
  testKey,
} from "./helpers/repository-kit.js";

/** A holder that answers as GET /cluster/chunks/{sha} does: from that node's repository. */
function holderOf(name: string, repo: ChunkRepository): ChunkHolder {
  return {
    name,
    async get(sha) {
      const data = await repo.chunkForPeer(sha);
      if (!data) throw new Error("not held here");
      return data;
    },
  };
}

class Peers implements ChunkPeers {
  held: string[] = [];
  forgot: string[] = [];
  constructor(private readonly list: () => Promise<ChunkHolder[]>) {}
  holders() {
    return this.list();
  }
  holding(id: string) {
    this.held.push(id);
  }
  forget(id: string) {
    this.forgot.push(id);
  }
}

async function setUp() {
  const root = fresh("repo");
  const backend = new SpyBackend(new PosixFsBackend(root));
  const data = seeded(6 * MiB, 41);
  const digests = [...new Set(digestsOf(data))];
  assert.ok(digests.length >= 3, `${digests.length} chunks`);
  // As the server is configured: a commit does not copy its chunks into the cache; the
  // committed folder is what the node serves them from.
  const a = new ChunkRepository(backend, testKey, { cache: newCache(), cacheOnCommit: false });
  const aPeers = new Peers(async () => []);
  a.usePeers(aPeers);
  const src = folder({ f: data });
  await a.commit("snap", src, {});
  assert.deepEqual(aPeers.held, ["snap"], "a commit tells the peers its node holds the chunks");
  return { root, backend, data, digests, a, src };
}

describe("snapshot chunks from peers", () => {
  test("a node restores a manifest whose chunks left the repository from the node that committed it", async () => {
    const { root, backend, data, digests, a } = await setUp();
    for (const d of digests) rmSync(join(root, chunkKey(d)));
    const b = new ChunkRepository(backend, testKey, { cache: newCache() });
    const bPeers = new Peers(async () => [holderOf("a", a)]);
    b.usePeers(bPeers);
    backend.chunkGets = 0;
    const out = join(fresh("o"), "snap");
    await b.materialize("snap", out);
    assert.deepEqual(readFileSync(join(out, "f")), data);
    const m = b.metrics();
    assert.equal(m.peerChunks, digests.length);
    assert.equal(m.peerBytes, data.length);
    assert.equal(m.misses, 0);
    assert.equal(backend.chunkGets, 0, "nothing asked of the repository");
    assert.deepEqual(bPeers.held, ["snap"], "a restore makes its node a holder too");
    await b.delete("snap");
    assert.deepEqual(bPeers.forgot, ["snap"]);
  });

  test("a chunk a peer sends wrong is refused and read from the next holder, then the repository", async () => {
    const { backend, data, digests, a, src } = await setUp();
    const [bad, worse] = digests as [string, string];
    // Holder "x" restored the snapshot (and serves from where it wrote it) and has one chunk
    // spoiled in its cache; holder "a" has that one and another spoiled in its folder.
    const x = new ChunkRepository(backend, testKey, { cache: newCache() });
    x.usePeers(new Peers(async () => []));
    await x.materialize("snap", join(fresh("o"), "x"));
    const xCached = (x.cache.fileOf(bad) as string) ?? assert.fail("x caches what it restored");
    writeFileSync(xCached, Buffer.alloc(readFileSync(xCached).length, 7));
    const pieces = cdcPieces(data);
    const offsetOf = (sha: string) => {
      let off = 0;
      for (const p of pieces) {
        if (createHash("sha256").update(p).digest("hex") === sha) return { off, len: p.length };
        off += p.length;
      }
      throw new Error("no such chunk");
    };
    const file = readFileSync(join(src, "f"));
    for (const [sha, byte] of [
      [bad, 1],
      [worse, 9],
    ] as const) {
      const { off, len } = offsetOf(sha);
      file.fill(byte, off, off + len);
    }
    writeFileSync(join(src, "f"), file);
    const b = new ChunkRepository(backend, testKey, { cache: newCache() });
    b.usePeers(new Peers(async () => [holderOf("a", a), holderOf("x", x)]));
    backend.chunkGets = 0;
    const out = join(fresh("o"), "snap");
    await b.materialize("snap", out);
    assert.deepEqual(readFileSync(join(out, "f")), data);
    const m = b.metrics();
    // `bad` is wrong on both holders: two refusals, then the repository; `worse` is wrong on
    // "a" only, so it comes from "x" (or from "x" first, in its rendezvous order).
    assert.equal(m.misses, 1, "only the chunk no holder sent right comes from the repository");
    assert.equal(backend.chunkGets, 1);
    assert.equal(m.peerChunks, digests.length - 1);
    assert.ok(m.peerRefused >= 2 && m.peerRefused <= 3, `${m.peerRefused} refused`);
  });

  test("a failing lookup or a holder that has nothing leaves the repository to serve it all", async () => {
    const { backend, data, digests } = await setUp();
    for (const [name, peers] of [
      ["lookup fails", new Peers(async () => Promise.reject(new Error("redis away")))],
      ["holder empty", new Peers(async () => [holderOf("empty", new ChunkRepository(backend, testKey))])],
    ] as const) {
      const b = new ChunkRepository(backend, testKey, { cache: newCache() });
      b.usePeers(peers);
      const out = join(fresh("o"), "snap");
      await b.materialize("snap", out);
      assert.deepEqual(readFileSync(join(out, "f")), data, name);
      assert.equal(b.metrics().misses, digests.length, name);
      assert.equal(b.metrics().peerChunks, 0, name);
    }
  });

  test("a node with no cache serves what it restored from where it wrote it, until that is gone", async () => {
    const { backend, data, digests } = await setUp();
    const b = new ChunkRepository(backend, testKey, { cache: newCache(0) });
    const peers = new Peers(async () => []);
    b.usePeers(peers);
    const out = join(fresh("o"), "snap");
    await b.materialize("snap", out);
    assert.deepEqual(peers.held, ["snap"]);
    const first = digests[0] as string;
    assert.deepEqual(await b.chunkForPeer(first), cdcPieces(data)[0]);
    rmSync(out, { recursive: true });
    assert.equal(await b.chunkForPeer(first), undefined);
  });
});
