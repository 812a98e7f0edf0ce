// fork ×16, and per-child errors when the node runs out of room.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Sandbox, ServiceBusyError } from "e2b";
import { counterLoop } from "./helpers/sandbox.js";
import { cleanupDataDir, startServer, useE2b } from "./helpers/server.js";

/** Forks `count` children of `p` into `kids` (so the caller kills them); every one must start. */
async function forkInto(p: Sandbox, count: number, kids: Sandbox[]): Promise<void> {
  const forked = (await p.fork({ count } as never)) as unknown as Array<Sandbox | Error>;
  for (const f of forked) {
    assert.ok(!(f instanceof Error), `child failed: ${(f as Error).message}`);
    kids.push(f as Sandbox);
  }
}

/** The sandbox's cgroups that the freezer holds (v1 freezer.state, or v2 cgroup.freeze). */
function frozenCgroups(id: string): string[] {
  const v1 = "/sys/fs/cgroup/freezer/aenv";
  const dir = existsSync(v1) ? v1 : "/sys/fs/cgroup/aenv";
  return readdirSync(dir)
    .filter((n) => n.startsWith(id))
    .filter((n) => {
      const state = dir === v1 ? join(dir, n, "freezer.state") : join(dir, n, "cgroup.freeze");
      return !/^(THAWED|0)$/.test(readFileSync(state, "utf8").trim());
    });
}

test("fork ×16: every child answers with the parent's state and its own identity", async () => {
  const server = await startServer();
  useE2b(server);
  let p: Sandbox | undefined;
  const kids: Sandbox[] = [];
  try {
    // Inside the try: a failed create must still stop the server, or the file hangs.
    p = await Sandbox.create({ timeoutMs: 300_000 });
    await p.files.write("/home/user/seed.txt", "seed");
    await forkInto(p, 16, kids);
    assert.equal(kids.length, 16);
    // Children that came up first were frozen while their siblings restored: all run again.
    assert.deepEqual(
      kids.flatMap((k) => frozenCgroups(k.sandboxId)),
      [],
    );
    const outs = await Promise.all(
      kids.map((k) => k.commands.run("cat /home/user/seed.txt; head -c 8 /dev/urandom | od -An -tx1")),
    );
    const rand = new Set(outs.map((o) => o.stdout));
    assert.equal(rand.size, 16);
    for (const o of outs) assert.match(o.stdout, /^seed/);
    assert.equal(new Set(kids.map((k) => k.sandboxId)).size, 16);
  } finally {
    await Promise.all([...(p ? [p] : []), ...kids].map((s) => s.kill().catch(() => false)));
    await server.stop();
    cleanupDataDir(server);
  }
});

test("when the node is full, each extra child fails on its own with a 503, the rest start", async () => {
  const server = await startServer({ env: { AENV_MAX_SANDBOXES: "3" } });
  useE2b(server);
  let p: Sandbox | undefined;
  const ok: Sandbox[] = [];
  try {
    p = await Sandbox.create();
    const forked = (await p.fork({ count: 4 } as never)) as unknown as Array<Sandbox | Error>;
    const errors = forked.filter((f) => f instanceof Error) as Error[];
    for (const f of forked) if (!(f instanceof Error)) ok.push(f as Sandbox);
    assert.equal(ok.length, 2);
    assert.equal(errors.length, 2);
    for (const e of errors) assert.ok(e instanceof ServiceBusyError, `${e.name}: ${e.message}`);
    for (const k of ok) assert.equal((await k.commands.run("echo ok")).stdout, "ok\n");
    const list = await server.api("GET", "/v2/sandboxes");
    assert.equal((list.body as unknown[]).length, 3, "no half-started children");
    await assert.rejects(Sandbox.create(), (e: Error) => e instanceof ServiceBusyError);
  } finally {
    await Promise.all([...(p ? [p] : []), ...ok].map((s) => s.kill().catch(() => false)));
    await server.stop();
    cleanupDataDir(server);
  }
});

test("a paused parent forks from its pause image: children carry its processes and files, it stays paused", async () => {
  const server = await startServer();
  useE2b(server);
  let p: Sandbox | undefined;
  const kids: Sandbox[] = [];
  try {
    // Inside the try: a failed create must still stop the server, or the file hangs.
    p = await Sandbox.create({ timeoutMs: 300_000 });
    await p.files.write("/home/user/seed.txt", "seed");
    // A counter only a live process keeps: a child rebooted from files would start it at 0 or not at all.
    await p.commands.run(counterLoop("/tmp/count"), {
      background: true,
      timeoutMs: 0,
    });
    let before = 0;
    for (let i = 0; before < 5 && i < 200; i++) {
      before = Number((await p.commands.run("cat /tmp/count || echo 0")).stdout.trim());
    }
    assert.ok(before >= 5, `the counter did not start (${before})`);
    assert.equal(await p.pause(), true);
    for (let round = 0; round < 2; round++) await forkInto(p, 2, kids);
    assert.equal(kids.length, 4);
    const outs = await Promise.all(
      kids.map((k) =>
        k.commands.run("cat /home/user/seed.txt; echo; cat /tmp/count; head -c 8 /dev/urandom | od -An -tx1"),
      ),
    );
    for (const o of outs) {
      const [seed, count] = o.stdout.split("\n");
      assert.equal(seed, "seed");
      assert.ok(Number(count) >= before, `the counter went on from ${before}, got ${count}`);
    }
    assert.equal(new Set(outs.map((o) => o.stdout)).size, 4, "each child has its own randomness");
    const info = await server.api("GET", `/sandboxes/${p.sandboxId}`);
    assert.equal((info.body as { state: string }).state, "paused", "the parent stays paused");
    // Children diverge from the parent, and the parent resumes where it was.
    await kids[0]?.files.write("/home/user/seed.txt", "child");
    const r = await Sandbox.connect(p.sandboxId);
    assert.equal(await r.files.read("/home/user/seed.txt"), "seed");
    const after = Number((await r.commands.run("sleep 0.5; cat /tmp/count")).stdout.trim());
    assert.ok(after >= before, `the parent's counter went on from ${before}, got ${after}`);
    // A filesystem-only pause keeps no processes to fork from: a clear conflict.
    assert.equal(await r.pause({ keepMemory: false } as never), true);
    const res = await server.api("POST", `/sandboxes/${p.sandboxId}/fork`, { count: 1 });
    assert.equal(res.status, 409);
    assert.match((res.body as { message: string }).message, /filesystem only/);
  } finally {
    await Promise.all([...(p ? [p] : []), ...kids].map((s) => s.kill().catch(() => false)));
    await server.stop();
    cleanupDataDir(server);
  }
});
