// Kill -9 of the server in the middle of a pause and of a fork: after a restart every sandbox
// is in its previous or its new state, and usable.
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function everySandboxUsable(server: TestServer): Promise<string[]> {
  const r = await server.api("GET", "/v2/sandboxes");
  const items = r.body as Array<{ sandboxID: string; state: string }>;
  for (const it of items) {
    const s = await Sandbox.connect(it.sandboxID);
    assert.equal(
      (await s.commands.run("cat /home/user/mark")).stdout,
      "marked\n",
      `sandbox ${it.sandboxID} (${it.state})`,
    );
  }
  return items.map((i) => i.sandboxID);
}

for (const delayMs of [100, 400]) {
  test(`SIGKILL ${delayMs} ms into a pause leaves the sandbox running or paused, and usable`, async () => {
    const first = await startServer();
    useE2b(first);
    const s = await Sandbox.create();
    await s.files.write("/home/user/mark", "marked\n");
    void first.api("POST", `/sandboxes/${s.sandboxId}/pause`, {}).catch(() => {});
    await sleep(delayMs);
    await first.crash();
    const second = await first.restart();
    try {
      const ids = await everySandboxUsable(second);
      assert.deepEqual(ids, [s.sandboxId]);
      await Sandbox.kill(s.sandboxId);
    } finally {
      await second.stop();
      cleanupDataDir(second);
    }
  });
}

test("SIGKILL right after a pause's answer: paused after the restart (its image written from the runtime), and usable", async () => {
  const first = await startServer();
  useE2b(first);
  const s = await Sandbox.create();
  await s.files.write("/home/user/mark", "marked\n");
  await s.commands.run("sleep 4545", { background: true, timeoutMs: 0 });
  // The pause answers once the sandbox is stopped in place; its image is still being written.
  assert.equal((await first.api("POST", `/sandboxes/${s.sandboxId}/pause`, {})).status, 204);
  await first.crash();
  const second = await first.restart();
  try {
    const info = await second.api("GET", `/sandboxes/${s.sandboxId}`);
    assert.equal((info.body as { state: string }).state, "paused");
    const r = await Sandbox.connect(s.sandboxId);
    assert.equal((await r.commands.run("cat /home/user/mark")).stdout, "marked\n");
    // Its memory too: the process from before the pause is there.
    assert.notEqual((await r.commands.run("pgrep -f 'sleep 454[5]' || echo none")).stdout.trim(), "none");
    await r.kill();
  } finally {
    await second.stop();
    cleanupDataDir(second);
  }
});

test("with sandbox.pause_waits_for_image, a pause answers once its image is on disk; SIGKILL then loses nothing", async () => {
  const first = await startServer({ env: { AENV_PAUSE_WAITS_FOR_IMAGE: "1" } });
  let second: TestServer | undefined;
  useE2b(first);
  try {
    const s = await Sandbox.create();
    await s.files.write("/home/user/mark", "marked\n");
    await s.commands.run("sleep 4546", { background: true, timeoutMs: 0 });
    assert.equal((await first.api("POST", `/sandboxes/${s.sandboxId}/pause`, {})).status, 204);
    // At the answer, before anything else runs: the image is whole (not written behind it).
    const image = join(first.dataDir, "sandboxes", s.sandboxId, "image");
    assert.ok(existsSync(join(image, "checkpoint.img")) && existsSync(join(image, "pages.img")), "image on disk");
    assert.doesNotMatch(first.logs(), /stopped in place/);
    await first.crash();
    second = await first.restart();
    assert.doesNotMatch(second.logs(), /image written after the restart/);
    const r = await Sandbox.connect(s.sandboxId);
    assert.equal((await r.commands.run("cat /home/user/mark")).stdout, "marked\n");
    assert.notEqual((await r.commands.run("pgrep -f 'sleep 454[6]' || echo none")).stdout.trim(), "none");
    await r.kill();
  } finally {
    await (second ?? first).stop();
    cleanupDataDir(second ?? first);
  }
});

test("SIGKILL in the middle of a fork leaves the parent usable, no half-started children and no capture", async () => {
  const first = await startServer();
  useE2b(first);
  const p = await Sandbox.create();
  await p.files.write("/home/user/mark", "marked\n");
  void first.api("POST", `/sandboxes/${p.sandboxId}/fork`, { count: 3 }).catch(() => {});
  await sleep(1200);
  await first.crash();
  const second = await first.restart();
  try {
    const ids = await everySandboxUsable(second);
    assert.ok(ids.includes(p.sandboxId));
    const forks = join(second.dataDir, "forks");
    assert.ok(!existsSync(forks) || readdirSync(forks).length === 0, "fork capture removed");
    for (const id of ids) await Sandbox.kill(id);
  } finally {
    await second.stop();
    cleanupDataDir(second);
  }
});
