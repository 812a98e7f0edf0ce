/**
 * Chunks planted by whoever can write the repository without its key: zstd frames that
 * decompress to far more than the manifest says. zstd writes what it decompresses to a tmpfs
 * folder (host memory) before anything is checked, so such a frame must be refused before
 * zstd runs, not after.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ChunkRepository } from "../src/storage/repository/chunk-repository.js";
import { chunkKey } from "../src/storage/repository/layout.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import { CorruptChunkError } from "../src/storage/repository/repository.js";
import { compress, decompressMany, frameProblem } from "../src/storage/repository/zstd.js";
import { folder, fresh, MiB, newCache, testKey } from "./helpers/repository-kit.js";

const BLOCK = 128 * 1024;

/**
 * A zstd frame of `blocks` RLE blocks of 128 KiB each (4 bytes apiece on the wire), with a
 * 128 KiB window and, when `contentSize` is given, that size declared in its header.
 */
function rleFrame(blocks: number, contentSize?: number): Buffer {
  const head =
    contentSize === undefined
      ? Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x00, 7 << 3])
      : Buffer.concat([Buffer.from([0x28, 0xb5, 0x2f, 0xfd, 0x80, 7 << 3]), u32(contentSize)]);
  const body = Buffer.alloc(blocks * 4);
  for (let i = 0; i < blocks; i++) {
    const h = (BLOCK << 3) | (1 << 1) | (i === blocks - 1 ? 1 : 0);
    body.writeUIntLE(h, i * 4, 3);
    body[i * 4 + 3] = 0x41;
  }
  return Buffer.concat([head, body]);
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

async function plantedChunk(): Promise<{ repo: ChunkRepository; b: PosixFsBackend; sha: string; size: number }> {
  const b = new PosixFsBackend(fresh("repo"));
  const writer = new ChunkRepository(b, testKey, { cache: newCache(), cacheOnCommit: false });
  const { manifest } = await writer.commit("snap_bomb", folder({ f: randomBytes(3 * MiB) }), {});
  const c = manifest.files[0]?.chunks[0];
  assert.ok(c);
  return { repo: new ChunkRepository(b, testKey, { cache: newCache() }), b, sha: c.sha256, size: c.size };
}

async function materializeFails(repo: ChunkRepository): Promise<Error> {
  const parent = fresh("out");
  const err = await repo.materialize("snap_bomb", join(parent, "x")).then(
    () => assert.fail("materialize succeeded"),
    (e: unknown) => e as Error,
  );
  assert.ok(err instanceof CorruptChunkError, String(err));
  assert.deepEqual(readdirSync(parent), []);
  return err;
}

describe("zstd bombs in the repository", () => {
  test("a chunk frame that declares no content size (512 MiB of RLE blocks) is refused before zstd runs", async () => {
    const { repo, b, sha } = await plantedChunk();
    const bomb = rleFrame(4096); // 16 KiB stored, 512 MiB decompressed
    await b.put(chunkKey(sha), bomb);
    const err = await materializeFails(repo);
    // Decompressing first would report "<536870912> bytes instead of <size>".
    assert.doesNotMatch(err.message, /bytes instead of/);
    assert.match(err.message, /content size/);
  });

  test("a valid frame followed by more frames (each declaring its size) is refused", async () => {
    const { repo, b, sha } = await plantedChunk();
    const good = (await b.get(chunkKey(sha))) as Buffer;
    const extra = Array.from({ length: 64 }, () => rleFrame(32, 32 * BLOCK));
    await b.put(chunkKey(sha), Buffer.concat([good, ...extra]));
    const err = await materializeFails(repo);
    assert.doesNotMatch(err.message, /bytes instead of/);
    assert.match(err.message, /after its frame/);
  });

  test("a frame declaring another size than the manifest's is refused; one that lies about it fails in zstd", async () => {
    const { repo, b, sha, size } = await plantedChunk();
    await b.put(chunkKey(sha), rleFrame(64, 64 * BLOCK));
    assert.match((await materializeFails(repo)).message, /declares 8388608 bytes/);
    // Declares the right size, then runs on: zstd stops at the declared size (its own check).
    await b.put(chunkKey(sha), rleFrame(4096, size));
    assert.match((await materializeFails(repo)).message, /does not decompress/);
  });

  test("frameProblem: truncated, reserved and foreign input get a reason; what compress makes passes", async () => {
    const data = randomBytes(300_000);
    const z = await compress(data);
    assert.equal(frameProblem(z, data.length), undefined);
    assert.deepEqual(await decompressMany([{ frame: z, size: data.length }]), [data]);
    assert.match(frameProblem(z.subarray(0, z.length - 5), data.length) ?? "", /truncated/);
    assert.match(frameProblem(Buffer.from("not zstd at all"), 15) ?? "", /not a zstd frame/);
    assert.match(frameProblem(Buffer.alloc(0), 1) ?? "", /not a zstd frame/);
    const reserved = Buffer.from(rleFrame(1, BLOCK));
    reserved.writeUIntLE((BLOCK << 3) | (3 << 1) | 1, 10, 3);
    assert.match(frameProblem(reserved, BLOCK) ?? "", /reserved block/);
    const [e] = await decompressMany([{ frame: rleFrame(8), size: 8 * BLOCK }]);
    assert.ok(e instanceof Error && /content size/.test(e.message));
  });
});
