/** The snapshot repository under faults (S3 stopped mid-upload, bad settings) and its content-defined chunking. */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { join } from "node:path";
import { describe, test } from "node:test";
import { BackendUnavailableError } from "../src/storage/repository/backend.js";
import { CDC_MAX, CDC_MIN, chunksOf, nextCut } from "../src/storage/repository/cdc.js";
import { ChunkRepository } from "../src/storage/repository/chunk-repository.js";
import { CHUNKS, chunkKey } from "../src/storage/repository/layout.js";
import { PosixFsBackend } from "../src/storage/repository/posix-fs-backend.js";
import { CommitError } from "../src/storage/repository/repository.js";
import { S3Backend } from "../src/storage/repository/s3-backend.js";
import {
  cdcPieces,
  digestsOf,
  distinctChunks,
  folder,
  fresh,
  keys,
  MiB,
  newCache,
  refsOf,
  SpyBackend,
  s3Prefix,
  seeded,
  sha256,
  testKey,
  useS3,
} from "./helpers/repository-kit.js";

const s3 = useS3();

describe("faults and start-up checks", () => {
  test("s3 stopped mid-upload: the commit fails clearly, nothing is visible, the retry succeeds", async () => {
    const b = new SpyBackend(new S3Backend(s3().backendOptions(s3Prefix("fault"))));
    const repo = new ChunkRepository(b, testKey, { cache: newCache(), concurrency: 2 });
    const data = seeded(40 * MiB, 16);
    const n = distinctChunks(data);
    assert.ok(n >= 10, `${n} chunks`);
    const src = folder({ "pages.img": data });
    let chunkPuts = 0;
    // Stopped at the 4th chunk put, once two puts are stored: uploads run in batches side by
    // side, so under load the 4th put can start before any other has finished.
    b.beforePut = async (key) => {
      if (!key.startsWith(CHUNKS) || ++chunkPuts !== 4) return;
      while (b.stored.filter((k) => k.startsWith(CHUNKS)).length < 2) await new Promise((r) => setTimeout(r, 5));
      await s3().stop();
    };
    let err: unknown;
    try {
      err = await repo.commit("sbx-fault", src, {}).then(
        () => assert.fail("commit succeeded"),
        (e: unknown) => e,
      );
    } finally {
      // Up again whatever happened, or the tests after this one would find no server.
      await s3().restart();
    }
    assert.ok(err instanceof CommitError, String(err));
    // A put in flight at the stop is reset; one started after it is refused.
    assert.match(err.message, /^commit of 'sbx-fault' failed: s3 .*chunks\/.*(ECONNREFUSED|ECONNRESET|socket|connect)/);
    b.beforePut = undefined;
    assert.equal(await repo.get("sbx-fault"), undefined);
    assert.deepEqual(
      (await repo.list()).map((m) => m.id),
      [],
    );
    const { stats } = await repo.commit("sbx-fault", src, {});
    // The puts stored before the stop are reused by the retry.
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
    const noBucket = new S3Backend({ ...s3().backendOptions(), bucket: "no-such-bucket" });
    await assert.rejects(noBucket.check(), (e: unknown) => {
      assert.ok(e instanceof BackendUnavailableError);
      assert.match(e.message, /no-such-bucket.*does not exist/);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
    const dead = new S3Backend({ ...s3().backendOptions(), endpoint: "http://127.0.0.1:1", maxAttempts: 1 });
    await assert.rejects(dead.check(), (e: unknown) => {
      assert.ok(e instanceof BackendUnavailableError);
      assert.match(e.message, /unreachable.*ECONNREFUSED/);
      assert.doesNotMatch(e.message, /\n/);
      return true;
    });
    assert.throws(() => new S3Backend({ ...s3().backendOptions(), region: "" }), /region is required/);
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
