// 100 concurrent Sandbox.create calls: every one answered, 201 or a clear 503 with
// Retry-After (ServiceBusyError), none lost; every sandbox created works; nothing is left once
// they are killed. The node starts only what it can finish soon (its start queue) and holds at
// most CAP sandboxes, so both answers happen in one burst.
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { after, before, test } from "node:test";
import { Sandbox, ServiceBusyError } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
const N = 100;
const CAP = 16;

before(async () => {
  // Idle ones hibernate quickly: 100 live sandboxes would otherwise hold both cores of a CI host.
  server = await startServer({
    env: { AENV_WARM_SLOTS: "8", AENV_HIBERNATE_AFTER: "3", AENV_MAX_SANDBOXES: String(CAP) },
  });
  useE2b(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
});

test(`${N} concurrent creates: each answered with a sandbox or a 503, each sandbox works`, async () => {
  const results = await Promise.allSettled(
    Array.from({ length: N }, (_, i) =>
      Sandbox.create({ metadata: { n: String(i) }, timeoutMs: 300_000, requestTimeoutMs: 300_000 }),
    ),
  );
  const made = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason as Error] : []));
  try {
    for (const err of refused) {
      assert.ok(err instanceof ServiceBusyError, `not a 503: ${err.message}`);
      assert.match(err.message, /retry in \d+ s|capacity/);
    }
    assert.equal(made.length + refused.length, N);
    assert.ok(made.length >= 1 && made.length <= CAP, `${made.length} of ${N} created (cap ${CAP})`);
    assert.ok(refused.length >= N - CAP, `${refused.length} refused`);
    // Every one runs commands and is listed with its own metadata.
    const outs: string[] = [];
    for (let i = 0; i < made.length; i += 10) {
      const batch = made.slice(i, i + 10).map((s) => s.commands.run("echo ok", { timeoutMs: 120_000 }));
      for (const r of await Promise.all(batch)) outs.push(r.stdout);
    }
    assert.ok(outs.every((o) => o === "ok\n"));
    const listed = new Set<string>();
    const pager = Sandbox.list({ limit: 100 });
    while (pager.hasNext) for (const s of await pager.nextItems()) listed.add(s.sandboxId);
    for (const s of made) assert.ok(listed.has(s.sandboxId), `${s.sandboxId} listed`);
  } finally {
    await Promise.all(made.map((s) => s.kill().catch(() => false)));
  }
  // Their runtime sandboxes are gone (pooled ones may remain: they are the node's own).
  const ids = new Set(made.map((s) => s.sandboxId));
  const deadline = Date.now() + 30_000;
  for (;;) {
    const root = existsSync("/sys/fs/cgroup/cgroup.controllers")
      ? "/sys/fs/cgroup/aenv"
      : "/sys/fs/cgroup/cpuacct/aenv";
    const left = readdirSync(root).filter((d) => ids.has(d.slice(0, 21)));
    if (left.length === 0) break;
    if (Date.now() > deadline) assert.fail(`runtime sandboxes left: ${left.join(", ")}`);
    await new Promise((r) => setTimeout(r, 200));
  }
});
