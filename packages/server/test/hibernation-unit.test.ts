// The hibernation sweep's idle decision, on a seam: the runtime's CPU counter and envd's answer
// are numbers here (test/hibernation.test.ts and the desktop's test run the real thing). A
// sandbox whose host-side CPU is over the threshold is frozen only when its own processes are
// quiet; one whose processes compute, or whose envd does not answer, stays awake.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import pino from "pino";
import type { ServerConfig } from "../src/config.js";
import { Hibernation } from "../src/orchestrator/hibernation.js";
import type { NodeContext } from "../src/orchestrator/node-context.js";
import type { Live, SandboxRegistry } from "../src/orchestrator/registry.js";
import type { SandboxRunner } from "../src/orchestrator/runner.js";
import type { RuntimeDriver } from "../src/runtime/driver.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One running sandbox whose host cgroup burns `hostPct` of a core and whose processes use
 * `guestPct` (undefined: envd does not answer); how many freezes reached the driver.
 */
function scene(o: { hostPct: number; guestPct: number | undefined; withGuest?: boolean }) {
  const t0 = Date.now();
  const live = {
    rec: { id: "s1", runtimeId: "r1", state: "running", metadata: {} },
    slot: { slotIp: "10.0.0.2" },
    opEpoch: 0,
  } as unknown as Live;
  let freezes = 0;
  const registry = {
    all: () => [live],
    enqueue: async (_l: Live, fn: () => Promise<void>) => fn(),
  } as unknown as SandboxRegistry;
  const driver = {
    freezer: {
      freeze: async () => {
        freezes++;
      },
      thaw: async () => {},
    },
    cpuMeter: { cpuTimeNs: () => (Date.now() - t0) * 1e6 * (o.hostPct / 100) },
  } as unknown as RuntimeDriver;
  const h = new Hibernation(
    {
      registry,
      driver,
      cfg: { hibernateAfterS: 1, hibernateCpuPct: 15, hibernateSaveAfterS: 0 } as ServerConfig,
      runner: { reduceMemory: async () => {} } as unknown as SandboxRunner,
      log: pino({ level: "silent" }),
    } as NodeContext,
    {
      pauses: { pause: async () => {} },
      guestCpuMs:
        o.withGuest === false
          ? undefined
          : async () => (o.guestPct === undefined ? undefined : (Date.now() - t0) * (o.guestPct / 100)),
    },
  );
  return { h, live, frozen: () => freezes };
}

async function runFor(h: Hibernation, ms: number): Promise<void> {
  h.start();
  await sleep(ms);
  h.stop();
}

// Each waits for sweeps: side by side, the file takes one wait.
describe("the idle decision", { concurrency: true }, () => {
  test("busy on the host, quiet inside (an idle desktop): frozen", async () => {
    const s = scene({ hostPct: 40, guestPct: 0.5 });
    // Frozen after a second idle; on a loaded host the sweeps that see it may come later.
    s.h.start();
    for (let t = Date.now(); s.frozen() === 0 && Date.now() - t < 10_000; ) await sleep(100);
    await sleep(500);
    s.h.stop();
    assert.equal(s.frozen(), 1);
    assert.equal(s.live.hibernated, true);
  });

  test("busy on the host and inside (a computation): never frozen", async () => {
    const s = scene({ hostPct: 90, guestPct: 85 });
    await runFor(s.h, 2000);
    assert.equal(s.frozen(), 0);
  });

  test("busy on the host and envd does not answer: never frozen", async () => {
    const s = scene({ hostPct: 40, guestPct: undefined });
    await runFor(s.h, 2000);
    assert.equal(s.frozen(), 0);
  });

  test("busy on the host with no way to ask inside: never frozen", async () => {
    const s = scene({ hostPct: 40, guestPct: 0, withGuest: false });
    await runFor(s.h, 2000);
    assert.equal(s.frozen(), 0);
  });

  test("quiet on the host: frozen without asking", async () => {
    const s = scene({ hostPct: 1, guestPct: undefined });
    await runFor(s.h, 2000);
    assert.equal(s.frozen(), 1);
  });
});
