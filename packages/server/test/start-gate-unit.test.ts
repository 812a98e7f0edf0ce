// The start gate: a burst of creates runs `concurrency` starts at a time, queues in arrival
// order what can start within the wait bound, and refuses the rest at once with a retry time.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AtCapacityError } from "@aenv/edge/errors";
import { StartGate } from "../src/orchestrator/start-gate.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("a burst: two run, the queue takes what fits in the wait bound, the rest are refused at once", async () => {
  // Starts take 100 ms; a wait of up to 250 ms is allowed: 2 running + 4 queued (100, 100,
  // 150, 150... ms ahead of them by position ÷ concurrency).
  const gate = new StartGate({ concurrency: 2, maxWaitMs: 250, initialStartMs: 100 });
  let active = 0;
  let most = 0;
  const order: number[] = [];
  const t0 = performance.now();
  const outcomes = await Promise.allSettled(
    Array.from({ length: 20 }, (_, i) =>
      gate.run(async () => {
        active++;
        most = Math.max(most, active);
        order.push(i);
        await sleep(100);
        active--;
        return i;
      }),
    ),
  );
  const served = outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
  const refused = outcomes.flatMap((o) => (o.status === "rejected" ? [o.reason as Error] : []));
  assert.equal(most, 2, "never more than the concurrency at once");
  assert.deepEqual(served, [0, 1, 2, 3, 4, 5, 6]);
  assert.deepEqual(order, served, "queued starts run in arrival order");
  assert.equal(refused.length, 13);
  for (const e of refused) {
    assert.ok(e instanceof AtCapacityError, String(e));
    assert.ok(e.retryAfterS >= 1);
    assert.match(e.message, /retry in \d+ s/);
  }
  assert.ok(performance.now() - t0 < 600, "the served ones are done in about 4 start times");
  assert.deepEqual(gate.load, { running: 0, queued: 0 });
});

test("the gate learns the start time from successful starts, not failed ones", async () => {
  const gate = new StartGate({ concurrency: 1, maxWaitMs: 1000, initialStartMs: 1000 });
  for (let i = 0; i < 10; i++) await gate.run(() => sleep(20));
  assert.ok(gate.expectedStartMs < 100, `learnt ${gate.expectedStartMs} ms`);
  const before = gate.expectedStartMs;
  await assert.rejects(
    gate.run(() => Promise.reject(new Error("boom"))),
    /boom/,
  );
  assert.equal(gate.expectedStartMs, before);
  // A failed start gave its turn back.
  assert.deepEqual(gate.load, { running: 0, queued: 0 });
});

test("with starts measured slow, the bound admits fewer", async () => {
  const gate = new StartGate({ concurrency: 1, maxWaitMs: 500, initialStartMs: 1000 });
  const first = gate.run(() => sleep(50));
  // One running; the next would wait a whole (measured) start: over the bound.
  await assert.rejects(
    gate.run(() => sleep(1)),
    (e: Error) => e instanceof AtCapacityError && e.retryAfterS === 1,
  );
  await first;
  assert.equal(await gate.run(async () => 7), 7, "an idle gate runs at once");
});
