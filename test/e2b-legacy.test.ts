// The older SDK generation (e2b 2.50.x) creates with POST /sandboxes and connects with
// POST /sandboxes/{id}/connect.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox } from "e2b-legacy";
import { serverForFile } from "./helpers/server.js";

serverForFile();

test("e2b 2.50 create, run, connect, list, kill", async () => {
  const s = await Sandbox.create({ metadata: { gen: "legacy" } });
  try {
    assert.equal((await s.commands.run("echo legacy")).stdout, "legacy\n");
    const c = await Sandbox.connect(s.sandboxId);
    assert.equal((await c.commands.run("echo connected")).stdout, "connected\n");
    await c.files.write("/home/user/l.txt", "L");
    assert.equal(await s.files.read("/home/user/l.txt"), "L");
    const items = await Sandbox.list({ query: { metadata: { gen: "legacy" } } }).nextItems();
    assert.deepEqual(
      items.map((i) => i.sandboxId),
      [s.sandboxId],
    );
  } finally {
    assert.equal(await s.kill(), true);
  }
});
