// State survives the server: sandboxes running when it died are reported and cleaned up on the
// next start, leaving no runsc sandboxes, namespaces or links behind.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, useE2b } from "./helpers/server.js";

function runscIds(dataDir: string): string[] {
  const out = execFileSync("runsc", [`--root=${dataDir}/runsc`, "list", "-quiet"], { encoding: "utf8" });
  return out.split("\n").filter(Boolean);
}

function netns(): string[] {
  return execFileSync("ip", ["netns", "list"], { encoding: "utf8" })
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter((n) => /^aet-[rs]\d+$/.test(n));
}

test("after a SIGKILL of the server, the next start reports and cleans up its sandboxes", async () => {
  const first = await startServer();
  useE2b(first);
  const s = await Sandbox.create();
  assert.equal((await s.commands.run("echo up")).stdout, "up\n");
  assert.deepEqual(runscIds(first.dataDir), [s.sandboxId]);
  await first.crash();
  // The sandbox process outlives a crashed server...
  assert.deepEqual(runscIds(first.dataDir), [s.sandboxId]);

  const second = await first.restart();
  try {
    const details = await second.api("GET", "/health/details");
    const rec = (details.body as { recovery: { cleanedUp: string[] } }).recovery;
    assert.deepEqual(rec.cleanedUp, [s.sandboxId]);
    assert.deepEqual(runscIds(second.dataDir), []);
    const list = await second.api("GET", "/v2/sandboxes");
    assert.deepEqual(list.body, []);
    assert.equal(await Sandbox.kill(s.sandboxId), false);
    // The new server works.
    const t = await Sandbox.create();
    assert.equal((await t.commands.run("echo again")).stdout, "again\n");
    await t.kill();
  } finally {
    await second.stop();
    cleanupDataDir(second);
  }
  assert.deepEqual(netns(), []);
});
