// Paused sandboxes are not kept forever when retention is configured: past a maximum age, or
// while their images add up to more than a total (oldest first), they are deleted with a log
// line, their repository pause manifest too.
import assert from "node:assert/strict";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { afterSweeps, cleanupDataDir, sdkOptions, startServer, type TestServer } from "./helpers/server.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Files of the repository that belong to this sandbox's pause (its manifest). */
function pauseObjects(server: TestServer, id: string): string[] {
  const root = join(server.dataDir, "repository");
  try {
    return (readdirSync(root, { recursive: true }) as string[]).filter((p) => p.includes(`sbx-${id}`));
  } catch {
    return [];
  }
}

async function stateOf(server: TestServer, id: string): Promise<string | undefined> {
  const r = await server.api("GET", `/sandboxes/${id}`);
  return r.status === 404 ? undefined : (r.body as { state: string }).state;
}

async function until(what: string, cond: () => Promise<boolean> | boolean, timeoutS = 60): Promise<void> {
  for (let i = 0; i < timeoutS * 5; i++) {
    if (await cond()) return;
    await sleep(200);
  }
  throw new Error(`${what}: still not so after ${timeoutS} s`);
}

test("a sandbox paused longer than the maximum age is deleted, with its repository pause manifest", async () => {
  const server = await startServer({ env: { AENV_PAUSED_MAX_AGE: "4", AENV_PAUSE_COMMIT_DELAY: "0" } });
  const opts = { ...sdkOptions(server), timeoutMs: 300_000 };
  const old = await Sandbox.create(opts);
  const live = await Sandbox.create(opts);
  try {
    // The server's pause time is after this, so its deletion must come 4 s after this at least.
    const beforePause = Date.now();
    assert.equal(await old.pause(), true);
    await until("pause manifest committed", () => pauseObjects(server, old.sandboxId).length > 0);
    await until("paused sandbox deleted", async () => (await stateOf(server, old.sandboxId)) === undefined);
    assert.ok(Date.now() - beforePause >= 4000, "not before its age was reached");
    assert.match(server.logs(), new RegExp(`"sandboxID":"${old.sandboxId}".*paused sandbox deleted by the retention`));
    await until("pause manifest removed", () => pauseObjects(server, old.sandboxId).length === 0, 20);
    await assert.rejects(Sandbox.connect(old.sandboxId, opts), /not found/i);
    // Running sandboxes are not its business.
    assert.equal(await stateOf(server, live.sandboxId), "running");
    assert.equal((await live.commands.run("echo up")).stdout, "up\n");
  } finally {
    await Promise.all([old, live].map((s) => s.kill().catch(() => false)));
    await server.stop();
    cleanupDataDir(server);
  }
});

test("paused images over the total: the oldest pauses go first, the rest stay resumable", async () => {
  const first = await startServer();
  const opts = { ...sdkOptions(first), timeoutMs: 300_000 };
  const a = await Sandbox.create(opts);
  const b = await Sandbox.create(opts);
  let server = first;
  try {
    await b.files.write("/home/user/b.txt", "kept");
    assert.equal(await a.pause(), true);
    assert.equal(await b.pause(), true);
    const bytes = async (id: string) => {
      const dir = join(first.dataDir, "sandboxes", id, "image");
      // Written right behind the pause's answer.
      await until("pause image written", () => existsSync(dir), 30);
      return readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
    };
    const total = (await bytes(a.sandboxId)) + (await bytes(b.sandboxId));
    await first.stop();
    // The same node restarted with a limit both images exceed together, not one alone.
    server = await startServer({
      dataDir: first.dataDir,
      port: first.port,
      env: { AENV_PAUSED_MAX_BYTES: String(total - 1) },
    });
    await until("oldest pause deleted", async () => (await stateOf(server, a.sandboxId)) === undefined);
    assert.match(server.logs(), /paused sandbox deleted by the retention limit/);
    await afterSweeps(server.url, "retention", 2);
    assert.equal(await stateOf(server, b.sandboxId), "paused", "the newer pause fits and stays");
    const r = await Sandbox.connect(b.sandboxId, { ...opts, ...sdkOptions(server) });
    assert.equal((await r.commands.run("cat /home/user/b.txt")).stdout, "kept");
  } finally {
    const o = sdkOptions(server);
    await Promise.all([a, b].map((s) => Sandbox.kill(s.sandboxId, o).catch(() => false)));
    await server.stop();
    cleanupDataDir(server);
  }
});
