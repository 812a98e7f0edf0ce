// A sandbox's console (its init's stdout and stderr) is a host file in the data dir, outside
// the sandbox's disk limit: root inside can write to it without end through /proc/1/fd/1. It
// is held to sandbox.max_console_bytes.
import assert from "node:assert/strict";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { serverForFile, waitFor } from "./helpers/server.js";

const LIMIT = 1024 * 1024;
const srv = serverForFile({ env: { AENV_MAX_CONSOLE_BYTES: String(LIMIT) } });

/** The console file of a sandbox's current runtime folder (its ID plus a per-start suffix). */
function consoleFile(id: string): string {
  const dir = join(srv().dataDir, "sandboxes", id);
  const runtime = readdirSync(dir).find((n) => n.startsWith(`${id}-`));
  assert.ok(runtime, "the sandbox has a runtime folder");
  return join(dir, runtime, "runsc.log");
}

test("a sandbox writing without end to its console holds at most the limit on the host", async () => {
  const s = await Sandbox.create();
  try {
    const file = consoleFile(s.sandboxId);
    const r = await s.commands.run("head -c 67108864 /dev/zero > /proc/1/fd/1 && echo written", {
      user: "root",
      timeoutMs: 120_000,
    });
    assert.equal(r.stdout, "written\n", "64 MiB went to the console");
    // The guard looks every second: within a few it has emptied what the writer left.
    await waitFor("the console back under its limit", () => statSync(file).size <= LIMIT + 4096, 10_000);
    // The size can be back under the limit a moment before the guard's line is written.
    await waitFor("the guard's log line", () => /sandbox console over its limit; emptied/.test(srv().logs()), 10_000);
    assert.equal((await s.commands.run("echo still")).stdout, "still\n", "the sandbox goes on");
  } finally {
    await s.kill();
  }
});
