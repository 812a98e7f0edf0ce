import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { PosixFsRepository } from "../src/storage/repository/posix-fs.js";
import { CorruptChunkError } from "../src/storage/repository/repository.js";

const root = mkdtempSync("/var/tmp/aenv-repo-test-");
after(() => rmSync(root, { recursive: true, force: true }));

function image(name: string, files: Record<string, Buffer>): string {
  const dir = join(root, "src", name);
  mkdirSync(dir, { recursive: true });
  for (const [f, data] of Object.entries(files)) writeFileSync(join(dir, f), data);
  return dir;
}

function chunkCount(repo: string): number {
  const base = join(repo, "chunks");
  if (!existsSync(base)) return 0;
  return readdirSync(base).reduce((n, d) => n + readdirSync(join(base, d)).length, 0);
}

describe("posix_fs snapshot repository", () => {
  const repoDir = join(root, "repo");
  const repo = new PosixFsRepository(repoDir);
  const big = randomBytes(9 * 1024 * 1024); // 3 chunks of ≤ 4 MiB
  const small = Buffer.from("checkpoint metadata");

  test("commit stores chunks and a manifest; materialize rebuilds the files byte for byte", async () => {
    const src = image("a", { "pages.img": big, "checkpoint.img": small });
    const { manifest, stats } = await repo.commit("snap_a", src, { note: "a" });
    assert.equal(stats.chunks, 4);
    assert.equal(stats.reused, 0);
    assert.deepEqual(
      manifest.files.map((f) => f.name),
      ["checkpoint.img", "pages.img"],
    );
    const out = join(root, "out-a");
    await repo.materialize("snap_a", out);
    assert.deepEqual(readFileSync(join(out, "pages.img")), big);
    assert.deepEqual(readFileSync(join(out, "checkpoint.img")), small);
    assert.deepEqual((await repo.get("snap_a"))?.meta, { note: "a" });
  });

  test("a second snapshot with shared content stores only new chunks", async () => {
    const changed = Buffer.from(big);
    changed.fill(7, 0, 1024); // first chunk differs, the rest is shared
    const src = image("b", { "pages.img": changed, "checkpoint.img": small });
    const { stats } = await repo.commit("snap_b", src, {});
    assert.equal(stats.reused, 3);
    assert.equal(chunkCount(repoDir), 5);
  });

  test("a corrupted chunk is detected, not restored silently", async () => {
    const m = await repo.get("snap_b");
    const sha = m?.files.find((f) => f.name === "pages.img")?.chunks[0]?.sha256 as string;
    const p = join(repoDir, "chunks", sha.slice(0, 2), sha);
    const data = readFileSync(p);
    data[10] ^= 0xff;
    writeFileSync(p, data);
    await assert.rejects(repo.materialize("snap_b", join(root, "out-b")), CorruptChunkError);
  });

  test("delete removes the manifest and only the chunks nobody else references", async () => {
    await repo.delete("snap_b");
    assert.equal(await repo.get("snap_b"), undefined);
    assert.equal(chunkCount(repoDir), 4);
    await repo.materialize("snap_a", join(root, "out-a2"));
    assert.deepEqual(readFileSync(join(root, "out-a2", "pages.img")), big);
    assert.deepEqual(
      (await repo.list()).map((m) => m.id),
      ["snap_a"],
    );
  });

  test("ids that could escape the repository are refused", async () => {
    await assert.rejects(repo.commit("../evil", image("c", { x: small }), {}));
  });
});
