/**
 * GET /snapshots hides a committed snapshot the repository no longer lists (deleted by another
 * server), but not one whose commit ended while the repository was being listed: that one is
 * not in the listing only because it was not there yet.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import pino from "pino";
import { NodePaths } from "../src/node-paths.js";
import type { NodeContext } from "../src/orchestrator/node-context.js";
import { Snapshots } from "../src/orchestrator/snapshots.js";
import type { Manifest, SnapshotRepository } from "../src/storage/repository/repository.js";

function deferred<T>() {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

test("a commit that ends while the repository is listed does not hide the snapshot", async () => {
  const dir = mkdtempSync("/var/tmp/aenv-snap-list-");
  try {
    const paths = new NodePaths(join(dir, "data"));
    const id = "snap_0123456789abcdef";
    // A snapshot taken before a restart, its commit not finished: recovery commits it again.
    mkdirSync(paths.snapshot(id), { recursive: true });
    writeFileSync(
      paths.snapshotPending(id),
      JSON.stringify({ id, names: ["n"], sandboxId: "s", templateId: "base", createdAt: 1, sizeBytes: 1 }),
    );
    const commit = deferred<{ stats: { uploadedBytes: number } }>();
    const listing = deferred<Manifest[]>();
    const repository = {
      list: async () => [],
      listFresh: () => listing.promise,
      announce: async () => {},
      withdraw: async () => {},
      commit: () => commit.promise,
    } as unknown as SnapshotRepository;
    const snaps = new Snapshots({
      paths,
      registry: {} as never,
      runner: { driver: { isCompleteCheckpoint: () => true } } as never,
      repository,
      checkpointKey: "k",
      templates: { get: () => undefined } as never,
      log: pino({ level: "silent" }),
    } as unknown as NodeContext);
    await snaps.recover();
    const listed = snaps.list();
    // The listing began; the commit ends; then the listing comes back without it.
    commit.resolve({ stats: { uploadedBytes: 1 } });
    await new Promise((r) => setImmediate(r));
    listing.resolve([]);
    assert.deepEqual(
      (await listed).map((s) => s.id),
      [id],
    );
    // Listed again later without it: deleted elsewhere, so hidden.
    const again = deferred<Manifest[]>();
    (repository as { listFresh: () => Promise<Manifest[]> }).listFresh = () => again.promise;
    const later = snaps.list();
    again.resolve([]);
    assert.deepEqual(await later, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
