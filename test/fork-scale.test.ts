// fork ×16, and per-child errors when the node runs out of room.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RateLimitError, Sandbox } from "e2b";
import { cleanupDataDir, startServer, useE2b } from "./helpers/server.js";

test("fork ×16: every child answers with the parent's state and its own identity", async () => {
  const server = await startServer();
  useE2b(server);
  const p = await Sandbox.create({ timeoutMs: 300_000 });
  const kids: Sandbox[] = [];
  try {
    await p.files.write("/home/user/seed.txt", "seed");
    const forked = (await p.fork({ count: 16 } as never)) as unknown as Array<Sandbox | Error>;
    for (const f of forked) {
      assert.ok(!(f instanceof Error), `child failed: ${(f as Error).message}`);
      kids.push(f as Sandbox);
    }
    assert.equal(kids.length, 16);
    const outs = await Promise.all(
      kids.map((k) => k.commands.run("cat /home/user/seed.txt; head -c 8 /dev/urandom | od -An -tx1")),
    );
    const rand = new Set(outs.map((o) => o.stdout));
    assert.equal(rand.size, 16);
    for (const o of outs) assert.match(o.stdout, /^seed/);
    assert.equal(new Set(kids.map((k) => k.sandboxId)).size, 16);
  } finally {
    await Promise.all([p, ...kids].map((s) => s.kill().catch(() => false)));
    await server.stop();
    cleanupDataDir(server);
  }
});

test("when the node is full, each extra child fails on its own with a 429, the rest start", async () => {
  const server = await startServer({ env: { AENV_MAX_SANDBOXES: "3" } });
  useE2b(server);
  const p = await Sandbox.create();
  const ok: Sandbox[] = [];
  try {
    const forked = (await p.fork({ count: 4 } as never)) as unknown as Array<Sandbox | Error>;
    const errors = forked.filter((f) => f instanceof Error) as Error[];
    for (const f of forked) if (!(f instanceof Error)) ok.push(f as Sandbox);
    assert.equal(ok.length, 2);
    assert.equal(errors.length, 2);
    for (const e of errors) assert.ok(e instanceof RateLimitError, `${e.name}: ${e.message}`);
    for (const k of ok) assert.equal((await k.commands.run("echo ok")).stdout, "ok\n");
    const list = await server.api("GET", "/v2/sandboxes");
    assert.equal((list.body as unknown[]).length, 3, "no half-started children");
    await assert.rejects(Sandbox.create(), (e: Error) => e instanceof RateLimitError);
  } finally {
    await Promise.all([p, ...ok].map((s) => s.kill().catch(() => false)));
    await server.stop();
    cleanupDataDir(server);
  }
});
