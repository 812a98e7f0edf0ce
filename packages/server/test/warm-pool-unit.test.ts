// The warm pool's refill is background work: it waits for a quiet moment in the runner. A
// seam test (the real pool is exercised end to end by test/warm-pool.test.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import type { ServerConfig } from "../src/config.js";
import type { NodePaths } from "../src/node-paths.js";
import type { SandboxRunner } from "../src/orchestrator/runner.js";
import type { WarmImages } from "../src/orchestrator/warm-images.js";
import { WarmPool } from "../src/orchestrator/warm-pool.js";
import type { RuntimeDriver } from "../src/runtime/driver.js";
import type { Template } from "../src/state/template-catalog.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("the pool does not restore while a caller's start is in flight or just ended", async () => {
  let quiet = false;
  let restores = 0;
  const pool = new WarmPool({
    cfg: { warmPoolMax: 2, warmPoolMin: 1 } as ServerConfig,
    paths: {} as NodePaths,
    runner: { quietFor: () => quiet } as unknown as SandboxRunner,
    driver: { freeze: async () => {} } as unknown as RuntimeDriver,
    // Counting is all this seam needs: no image, so the refill stops after asking once.
    warmImages: {
      take: () => {
        restores++;
        return undefined;
      },
    } as unknown as WarmImages,
    runtimeDir: "/nonexistent",
    mayGrow: () => true,
    log: pino({ level: "silent" }),
  });
  try {
    assert.equal(pool.take({ id: "t", revision: 1 } as Template), undefined, "empty: a create misses");
    await sleep(400);
    assert.equal(restores, 0, "no restore while the runner is busy");
    quiet = true;
    await sleep(400);
    assert.equal(restores, 1, "the refill goes on once it is quiet");
  } finally {
    await pool.close();
  }
});
