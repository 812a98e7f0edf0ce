// The warm pool's refill policy, on a seam: restores are a timer here (the real pool is
// exercised end to end by test/warm-pool.test.ts). A refill waits while a caller's own start
// is in flight, starts at once after a claim, and a create that missed joins the restore in
// flight.
import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import type { ServerConfig } from "../src/config.js";
import type { NodePaths } from "../src/node-paths.js";
import type { NodeContext } from "../src/orchestrator/node-context.js";
import type { Live, SandboxRegistry } from "../src/orchestrator/registry.js";
import type { SandboxRunner } from "../src/orchestrator/runner.js";
import type { WarmImages } from "../src/orchestrator/warm-images.js";
import { WarmPool } from "../src/orchestrator/warm-pool.js";
import type { RuntimeDriver } from "../src/runtime/driver.js";
import type { Template } from "../src/state/template-catalog.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TPL = { id: "t", name: "t", revision: 1, rootfs: "/nonexistent", cpuCount: 1, memoryMB: 256, diskSizeMB: 0 };

/** A pool whose restores take `restoreMs` and succeed, with counters to look at. */
function fakePool(o: { restoreMs: number; quiet: () => boolean; max?: number }) {
  const seen = { restores: 0, removed: 0 };
  const ctx = {
    cfg: {
      maxSandboxes: 100,
      warmPoolMax: o.max ?? 2,
      warmPoolMin: 1,
      maxDiskSizeMB: 0,
      defaultTimeoutS: 300,
      maxTimeoutS: 3600,
    } as ServerConfig,
    paths: { sandbox: (id: string) => `/nonexistent/${id}` } as unknown as NodePaths,
    runner: {
      quietFor: o.quiet,
      bring: async (_live: Live) => {
        seen.restores++;
        await sleep(o.restoreMs);
      },
      remove: async () => {
        seen.removed++;
      },
    } as unknown as SandboxRunner,
    driver: {
      freezer: { freeze: async () => {}, thaw: async () => {} },
      prioritize: async () => {},
    } as unknown as RuntimeDriver,
    registry: { isClosing: false, list: () => [] } as unknown as SandboxRegistry,
    runtimeDir: "/nonexistent",
    log: pino({ level: process.env.POOL_LOG ?? "silent" }),
  } as NodeContext;
  const pool = new WarmPool(ctx, { warmImages: { take: () => "/nonexistent/image" } as unknown as WarmImages });
  return { pool, seen };
}

test("the pool does not restore while a caller's start is in flight", async () => {
  let quiet = false;
  const { pool, seen } = fakePool({ restoreMs: 10, quiet: () => quiet });
  try {
    assert.equal(pool.take(TPL as Template), undefined, "empty: a create misses");
    await sleep(300);
    assert.equal(seen.restores, 0, "no restore while the runner is busy");
    quiet = true;
    await sleep(300);
    assert.equal(seen.restores, 1, "the refill goes on once it is quiet (the minimum of one)");
  } finally {
    await pool.close();
  }
});

test("a claim starts the refill at once; back-to-back creates find the pool full", async () => {
  const { pool, seen } = fakePool({ restoreMs: 30, quiet: () => true });
  try {
    pool.take(TPL as Template);
    await sleep(150);
    let hits = 0;
    // One create every 60 ms, each after the last was served: twice the restore time.
    for (let i = 0; i < 8; i++) {
      if (pool.take(TPL as Template)) hits++;
      await sleep(60);
    }
    assert.equal(hits, 8, `every create served from the pool (${seen.restores} restores)`);
  } finally {
    await pool.close();
  }
});

test("a create that missed joins the restore in flight; one waiter per restore the pool makes", async () => {
  const { pool, seen } = fakePool({ restoreMs: 300, quiet: () => true, max: 1 });
  try {
    assert.equal(pool.take(TPL as Template), undefined);
    // The next create comes while the refill is halfway through.
    await sleep(150);
    const t0 = performance.now();
    const first = pool.next(TPL as Template);
    // The pool makes one at a time here (max 1): a second waiter would wait for nothing.
    assert.equal(await pool.next(TPL as Template), undefined, "beyond the pool's size: no wait");
    const got = await first;
    assert.ok(got, "the waiter got the sandbox the refill restored");
    assert.ok(performance.now() - t0 < 280, "sooner than a restore of its own");
    // Handed over, not pooled: the pool goes on with one for itself.
    assert.equal(pool.take(TPL as Template), undefined);
    await sleep(450);
    assert.equal(seen.restores, 2);
    assert.ok(pool.take(TPL as Template));
  } finally {
    await pool.close();
  }
});

test("no refill under way: a miss does not wait", async () => {
  const { pool } = fakePool({ restoreMs: 10, quiet: () => false });
  try {
    assert.equal(await pool.next(TPL as Template), undefined, "no pool for the template yet");
  } finally {
    await pool.close();
  }
});

test("forgetting a template waits for its restore in flight and removes its pooled sandboxes", async () => {
  const { pool, seen } = fakePool({ restoreMs: 200, quiet: () => true });
  try {
    pool.take(TPL as Template);
    await sleep(50);
    const t0 = performance.now();
    await pool.forget(TPL.id);
    assert.ok(performance.now() - t0 >= 100, "waited for the restore that was reading the tree");
    assert.equal(seen.restores, 1, "no refill after it");
    assert.equal(seen.removed, 1, "the one it restored is removed, not pooled");
    await sleep(300);
    assert.equal(seen.restores, 1);
  } finally {
    await pool.close();
  }
});
