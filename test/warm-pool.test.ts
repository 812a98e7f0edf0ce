// Warm pool: creates take a sandbox restored ahead of time; each gets its own
// identity, token, env, metadata, timeout and network policy, and pooled ones stay invisible.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b, waitFor } from "./helpers/server.js";

let server: TestServer;

before(async () => {
  server = await startServer({ env: { AENV_WARM_POOL_MIN: "2", AENV_WARM_POOL_MAX: "2" } });
  useE2b(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
});

const pooledCreates = () =>
  server
    .logs()
    .split("\n")
    .filter((l) => l.includes('"from":"pool"')).length;

test("creates are served from the pool with their own identity, env, metadata, timeout and policy", async () => {
  // The first create of a template starts its pool (and joins the pool's first restore).
  const first = await Sandbox.create();
  await first.kill();
  const byFirst = pooledCreates();
  assert.ok(byFirst <= 1);
  // Two restored and frozen in the background.
  await waitFor("two pooled sandboxes", () => (server.logs().match(/warm pool sandbox ready/g) ?? []).length >= 2);
  const before_ = (await Sandbox.list().nextItems()).length;
  assert.equal(before_, 0, "pooled sandboxes are not listed");

  const a = await Sandbox.create({ envs: { WHO: "a" }, metadata: { user: "a" }, timeoutMs: 120_000 });
  const b = await Sandbox.create({ envs: { WHO: "b" }, metadata: { user: "b" }, allowInternetAccess: false });
  try {
    // The server's log reaches this process on another pipe than the API's answer: poll.
    await waitFor("two creates served from the pool", () => pooledCreates() >= byFirst + 2, 5_000).catch(() => {});
    assert.equal(pooledCreates(), byFirst + 2, server.logs().slice(-3000));
    assert.notEqual(a.sandboxId, b.sandboxId);
    assert.equal((await a.commands.run("echo $WHO")).stdout, "a\n");
    assert.equal((await b.commands.run("echo $WHO")).stdout, "b\n");
    // The pool ran one command in each before freezing it (its first calls then cost what later
    // ones do): nothing of it is left running.
    const ps = (await a.commands.run("ps -eo args")).stdout;
    assert.ok(!ps.includes("-c true"), ps);
    const ia = await a.getInfo();
    assert.deepEqual(ia.metadata, { user: "a" });
    const left = new Date(ia.endAt).getTime() - Date.now();
    assert.ok(left > 100_000 && left <= 120_000, `timeout applied: ${left} ms left`);
    assert.equal((await b.getInfo()).allowInternetAccess, false);
    // Each has its own envd token: one's does not open the other.
    const res = await fetch(`${server.url}/files?path=/etc/hostname`, {
      headers: { "e2b-sandbox-id": b.sandboxId, "e2b-sandbox-port": "49983", "x-access-token": "wrong" },
    });
    assert.equal(res.status, 401);
    // Fresh randomness per sandbox, though both came from one image.
    const ra = await a.commands.run("head -c 16 /dev/urandom | od -An -tx1");
    const rb = await b.commands.run("head -c 16 /dev/urandom | od -An -tx1");
    assert.notEqual(ra.stdout, rb.stdout);
    const listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId).sort();
    assert.deepEqual(listed, [a.sandboxId, b.sandboxId].sort());
    // The pool refills behind the claims.
    await waitFor("the pool refilled", () => (server.logs().match(/warm pool sandbox ready/g) ?? []).length >= 4);
  } finally {
    await a.kill();
    await b.kill();
  }
});
