/**
 * A pause offered to peers before its commit ends (cluster.p2p): the pausing node builds the
 * manifest a commit would store without touching the backend, sealed with the repository key,
 * and serves its chunks from the folder it was built from; another node opens it only sealed
 * for that pause's ID, takes it only when it names the pause the cluster offers (its tag), and
 * restores it chunk by chunk from the peer, refusing any chunk whose digest is wrong (the
 * repository has none of them, so the restore fails and leaves nothing). test/pause-p2p.test.ts
 * runs the same over real nodes.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import pino from "pino";
import { NodePaths } from "../src/node-paths.js";
import { checkPeerPause } from "../src/orchestrator/pause-from-peer.js";
import { PauseOffers, type PausePeers } from "../src/orchestrator/pause-offers.js";
import { SandboxRegistry } from "../src/orchestrator/registry.js";
import type { SandboxRecord } from "../src/state/store.js";
import { ChunkRepository } from "../src/storage/repository/chunk-repository.js";
import { pauseManifestId, pauseMetaFor } from "../src/storage/repository/manifest-kinds.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import type { ChunkHolder } from "../src/storage/repository/repository.js";
import { RepositoryKey } from "../src/storage/repository/signing.js";
import { digestsOf, folder, fresh, MiB, newCache, SpyBackend, seeded, testKey } from "./helpers/repository-kit.js";

const SBX = "i0123456789abcdefghij";
const record = (tag: string, id = SBX) =>
  ({
    id,
    templateId: "base",
    alias: "base",
    rootfs: "/var/lib/aenv/templates/base/rootfs",
    runtimeDir: "/var/lib/aenv/runtime",
    envdToken: "t",
    envVars: {},
    metadata: {},
    cpuCount: 1,
    memoryMB: 512,
    diskSizeMB: 1024,
    startedAt: 1,
    endAt: 2,
    autoResume: false,
    state: "paused",
    dir: `/var/lib/aenv/sandboxes/${id}`,
    slotIndex: null,
    pause: { tag, kind: "memory", imageDir: `/var/lib/aenv/sandboxes/${id}/image` },
  }) as unknown as SandboxRecord;

function holderOf(repo: ChunkRepository, spoil?: string): ChunkHolder {
  return {
    name: "a",
    async get(sha) {
      const data = await repo.chunkForPeer(sha);
      if (!data) throw new Error("not held here");
      return sha === spoil ? Buffer.alloc(data.length, 3) : data;
    },
  };
}

async function offered() {
  const data = seeded(3 * MiB, 7);
  const a = new ChunkRepository(new PosixFsBackend(fresh("repo-a")), testKey, { cache: newCache() });
  const src = folder({ "checkpoint.img": data });
  const meta = pauseMetaFor(record("t1"), "key");
  const sealed = await a.offer(pauseManifestId(SBX), src, meta, "offer-1");
  // The other node shares no backend content with it: everything must come from the peer.
  const backend = new SpyBackend(new PosixFsBackend(fresh("repo-b")));
  const b = new ChunkRepository(backend, testKey, { cache: newCache() });
  return { a, b, backend, data, sealed };
}

describe("pauses offered to peers", () => {
  test("a peer restores an offered pause from the offering node, nothing asked of the repository", async () => {
    const { a, b, backend, data, sealed } = await offered();
    const m = b.openOffered(pauseManifestId(SBX), sealed);
    assert.equal(checkPeerPause(SBX, "t1", m).sandbox.id, SBX);
    const out = join(fresh("out"), "image");
    await b.materializeFrom(m, out, [holderOf(a)]);
    assert.deepEqual(readFileSync(join(out, "checkpoint.img")), data);
    assert.equal(backend.chunkGets, 0);
    // Once the offer is forgotten its chunks are served no more.
    a.forgetOffer("offer-1");
    assert.equal(await a.chunkForPeer(digestsOf(data)[0] as string), undefined);
  });

  test("a chunk the peer sends wrong is refused: the restore fails and leaves nothing", async () => {
    const { a, b, data, sealed } = await offered();
    const m = b.openOffered(pauseManifestId(SBX), sealed);
    const out = join(fresh("out"), "image");
    await assert.rejects(b.materializeFrom(m, out, [holderOf(a, digestsOf(data)[1])]), /chunk [0-9a-f]{64} is missing/);
    assert.equal(existsSync(out), false);
  });

  test("a manifest not sealed for this pause by this cluster, or naming another pause, is refused", async () => {
    const { b, sealed } = await offered();
    assert.throws(() => b.openOffered(pauseManifestId("i9999999999abcdefghij"), sealed), /signature does not match/);
    const other = new ChunkRepository(
      new PosixFsBackend(fresh("repo-c")),
      new RepositoryKey("another cluster's key 0123456789abcdef"),
    );
    assert.throws(() => other.openOffered(pauseManifestId(SBX), sealed), /signature does not match/);
    assert.throws(() => b.openOffered(pauseManifestId(SBX), Buffer.from("{}")), /not signed/);
    const m = b.openOffered(pauseManifestId(SBX), sealed);
    assert.throws(() => checkPeerPause(SBX, "t2", m), /pause t1 is not the one the cluster offers \(t2\)/);
    assert.throws(() => checkPeerPause("i9999999999abcdefghij", "t1", m), /names another sandbox/);
  });
});

describe("the pausing node's offers", () => {
  function node() {
    const data = fresh("data");
    const paths = new NodePaths(data, fresh("templates"));
    const dir = join(data, "sandboxes", SBX);
    mkdirSync(join(dir, "image"), { recursive: true });
    writeFileSync(join(dir, "image", "checkpoint.img"), seeded(MiB, 3));
    const rec = { ...record("t1"), dir, pause: { tag: "t1", kind: "memory", imageDir: join(dir, "image") } };
    const registry = new SandboxRegistry({ maxSandboxes: 4, maxMemoryMB: 4096, maxCpus: 4 });
    registry.add({ rec: rec as SandboxRecord, op: Promise.resolve() });
    const calls: string[] = [];
    const peers: PausePeers = {
      offer: (id, tag) => calls.push(`offer ${id} ${tag}`),
      withdraw: (id, tag) => calls.push(`withdraw ${id} ${tag}`),
      fetch: async () => undefined,
    };
    const repository = new ChunkRepository(new PosixFsBackend(fresh("repo")), testKey, { cache: newCache() });
    const offers = (repo: Pick<ChunkRepository, "offer" | "forgetOffer"> = repository) =>
      new PauseOffers({
        paths,
        registry,
        repository: repo,
        peers,
        checkpointKey: "key",
        log: pino({ level: "silent" }),
      });
    return { paths, registry, rec: rec as SandboxRecord, calls, repository, offers };
  }

  test("a pause sent to a peer stays marked so across a restart; one never sent is not", async () => {
    const n = node();
    const a = n.offers();
    a.offer(n.rec);
    assert.deepEqual(n.calls, [`offer ${SBX} t1`]);
    assert.equal(a.served(SBX, "t1"), false, "offered is not sent");
    assert.equal(n.offers().served(SBX, "t1"), false);
    const sealed = await a.serve(SBX);
    assert.ok(sealed, "sent while paused");
    assert.equal(a.served(SBX, "t1"), true);
    assert.equal(a.served(SBX, "t2"), false, "another pause of it was not");
    assert.equal(n.offers().served(SBX, "t1"), true, "a restarted node still knows");
    // Its chunks are served from links beside the image: removing the image takes nothing.
    const m = n.repository.openOffered(pauseManifestId(SBX), sealed);
    const sha = m.files[0]?.chunks[0]?.sha256 as string;
    rmSync(join(n.rec.dir, "image"), { recursive: true, force: true });
    assert.ok(await n.repository.chunkForPeer(sha));
    a.release(SBX);
    assert.deepEqual(n.calls.at(-1), `withdraw ${SBX} t1`);
    assert.ok(await n.repository.chunkForPeer(sha), "kept a while for the peer reading it");
  });

  test("a resume here does not wait while a peer's manifest is built; one that comes first sends nothing", async () => {
    const n = node();
    let go = () => {};
    const held = new Promise<void>((r) => (go = r));
    const slow: Pick<ChunkRepository, "offer" | "forgetOffer"> = {
      offer: async (...a) => {
        await held; // hashing a large image
        return n.repository.offer(...a);
      },
      forgetOffer: (local) => n.repository.forgetOffer(local),
    };
    const a = n.offers(slow);
    a.offer(n.rec);
    const l = n.registry.mustGet(SBX);
    const sending = a.serve(SBX);
    // The sandbox's queue is free meanwhile: a resume runs at once and leaves it running.
    let resumed = false;
    await n.registry.enqueue(l, async () => {
      (n.rec as { state: string }).state = "running";
      resumed = true;
    });
    assert.equal(resumed, true);
    go();
    assert.equal(await sending, undefined, "a sandbox resumed here is no peer's");
    assert.equal(a.served(SBX, "t1"), false);
    assert.deepEqual(readdirSync(n.paths.peerPauses), [], "what was built is gone");
  });

  test("nothing is sent of a sandbox that is not paused here", async () => {
    const n = node();
    (n.rec as { state: string }).state = "running";
    assert.equal(await n.offers().serve(SBX), undefined);
    assert.equal(await n.offers().serve("i9999999999abcdefghij"), undefined);
    assert.equal(existsSync(n.paths.peerPauses), false, "nothing built");
  });
});
