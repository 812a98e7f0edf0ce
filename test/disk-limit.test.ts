// A sandbox's writable layer is bounded by its disk size: past it, writes fail with ENOSPC
// inside the sandbox, which keeps working; the bound holds across pause/resume and fork.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { serverForFile } from "./helpers/server.js";

// The base template asks for 2 GiB; the node caps every sandbox at 64 MiB so the test fills it fast.
const srv = serverForFile({ env: { AENV_MAX_DISK_SIZE_MB: "64" } });

/** Runs a shell line, returns its combined output and exit code (never throws on a non-zero exit). */
async function sh(s: Sandbox, cmd: string): Promise<{ out: string; rc: number }> {
  const r = await s.commands.run(`{ ${cmd} ; } 2>&1; echo "rc=$?"`, { timeoutMs: 120_000 });
  const m = /rc=(\d+)\s*$/.exec(r.stdout);
  return { out: r.stdout, rc: Number(m?.[1] ?? -1) };
}

const fill = (name: string, mb: number) => `dd if=/dev/zero of=/home/user/${name} bs=1M count=${mb} conv=fsync`;

test("writes past the disk size fail with ENOSPC; the sandbox keeps working and deleting frees space", async () => {
  const s = await Sandbox.create({ timeoutMs: 300_000 });
  const kids: Sandbox[] = [];
  try {
    const info = await srv().api("GET", `/sandboxes/${s.sandboxId}`);
    assert.equal((info.body as { diskSizeMB: number }).diskSizeMB, 64, "the node's cap is what the sandbox gets");

    const full = await sh(s, fill("big", 200));
    assert.notEqual(full.rc, 0, full.out);
    assert.match(full.out, /No space left on device/);
    assert.equal((await s.commands.run("echo still here")).stdout, "still here\n");
    await s.commands.run("rm /home/user/big");
    const again = await sh(s, fill("small", 32));
    assert.equal(again.rc, 0, `space is back after the delete: ${again.out}`);

    // A checkpoint restores into a fresh disk of the same size: files kept, bound kept.
    assert.equal(await s.pause(), true);
    const r = await Sandbox.connect(s.sandboxId);
    assert.equal((await r.commands.run("stat -c %s /home/user/small")).stdout.trim(), String(32 * 2 ** 20));
    const afterResume = await sh(r, fill("big2", 200));
    assert.notEqual(afterResume.rc, 0, afterResume.out);
    assert.match(afterResume.out, /No space left on device/);
    await r.commands.run("rm -f /home/user/big2");

    // A fork child inherits the files and the bound.
    const forked = (await r.fork({ count: 1 } as never)) as unknown as Array<Sandbox | Error>;
    const kid = forked[0];
    assert.ok(kid && !(kid instanceof Error), `fork failed: ${(kid as Error | undefined)?.message}`);
    kids.push(kid);
    assert.equal((await kid.commands.run("stat -c %s /home/user/small")).stdout.trim(), String(32 * 2 ** 20));
    const inKid = await sh(kid, fill("big3", 200));
    assert.notEqual(inKid.rc, 0, inKid.out);
    assert.match(inKid.out, /No space left on device/);
    assert.equal((await kid.commands.run("echo kid ok")).stdout, "kid ok\n");
  } finally {
    await Promise.all([s, ...kids].map((x) => x.kill().catch(() => false)));
  }
});
