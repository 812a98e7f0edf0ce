// A sandbox is its own kernel boundary: no host processes, no host files, no other sandbox's files.
import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
const HOST_SECRET = "/tmp/aenv-host-secret.txt";

before(async () => {
  writeFileSync(HOST_SECRET, "host-only");
  server = await startServer();
  useE2b(server);
});

after(async () => {
  rmSync(HOST_SECRET, { force: true });
  await server?.stop();
  if (server) cleanupDataDir(server);
});

test("a sandbox sees only its own processes and runs under gVisor", async () => {
  const s = await Sandbox.create();
  try {
    const ps = await s.commands.run("ps -e -o comm= | sort -u");
    assert.doesNotMatch(ps.stdout, /aenv-server|runsc|systemd|sshd/);
    const hostPid = await s.commands.run(
      `test -e /proc/${process.pid}/cmdline && cat /proc/${process.pid}/cmdline | tr '\\0' ' ' || echo none`,
    );
    assert.doesNotMatch(hostPid.stdout, /aenv-server/);
    const dmesg = await s.commands.run("dmesg 2>/dev/null | head -1 || true", { user: "root" });
    assert.match(dmesg.stdout, /gVisor|Starting/i);
  } finally {
    await s.kill();
  }
});

test("host files are invisible and the template rootfs is not written", async () => {
  const s = await Sandbox.create();
  try {
    assert.equal(await s.files.exists(HOST_SECRET), false);
    const r = await s.commands.run(`cat ${HOST_SECRET} 2>&1 || echo absent`);
    assert.match(r.stdout, /absent/);
    await s.commands.run("echo sandbox-write > /etc/aenv-written", { user: "root" });
    assert.equal((await s.commands.run("cat /etc/aenv-written")).stdout, "sandbox-write\n");
  } finally {
    await s.kill();
  }
  const { existsSync } = await import("node:fs");
  assert.equal(existsSync("/var/lib/aenv/templates/base/rootfs/etc/aenv-written"), false);
});

test("sandboxes do not see each other's files", async () => {
  const a = await Sandbox.create();
  const b = await Sandbox.create();
  try {
    await a.files.write("/home/user/only-in-a.txt", "a");
    await a.commands.run("echo a > /tmp/only-in-a");
    assert.equal(await b.files.exists("/home/user/only-in-a.txt"), false);
    assert.equal(await b.files.exists("/tmp/only-in-a"), false);
  } finally {
    await a.kill();
    await b.kill();
  }
});

test("CPU, memory and pids limits are applied to the sandbox's cgroup and visible inside", async () => {
  const s = await Sandbox.create();
  try {
    const { readFileSync, readdirSync } = await import("node:fs");
    // The runtime sandbox is named after the sandbox ID plus a per-start suffix.
    const dir = (ctl: string) => readdirSync(`/sys/fs/cgroup/${ctl}/aenv`).find((d) => d.startsWith(`${s.sandboxId}-`));
    const cg = (ctl: string, file: string) =>
      readFileSync(`/sys/fs/cgroup/${ctl}/aenv/${dir(ctl)}/${file}`, "utf8").trim();
    const info = await s.getInfo();
    assert.equal(Number(cg("memory", "memory.limit_in_bytes")), info.memoryMB * 1024 * 1024);
    assert.equal(Number(cg("cpu", "cpu.cfs_quota_us")), info.cpuCount * 100000);
    assert.equal(cg("pids", "pids.max"), "4096");
    const inside = await s.commands.run("grep MemTotal /proc/meminfo | tr -s ' '; nproc");
    assert.equal(inside.stdout, `MemTotal: ${info.memoryMB * 1024} kB\n${info.cpuCount}\n`);
  } finally {
    await s.kill();
  }
});
