// Hibernation's saved tier: a sandbox idle for hibernate_save_after is saved to
// disk and its memory given back; to its client it stays running (state, TTL), and its next
// use brings it back with its processes and files. One holding a TCP connection to outside
// it stays frozen in memory instead (a checkpoint would reset the connection).
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, untilLogLine, useE2b, waitFor } from "./helpers/server.js";

let server: TestServer;

before(async () => {
  server = await startServer({
    env: { AENV_HIBERNATE_AFTER: "1", AENV_HIBERNATE_SAVE_AFTER: "3", AENV_WARM_POOL_MAX: "0" },
  });
  useE2b(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
});

/** Whether the sandbox has a runtime on the host (its cgroup), i.e. is not saved to disk. */
function hasRuntime(id: string): boolean {
  const root = existsSync("/sys/fs/cgroup/cgroup.controllers") ? "/sys/fs/cgroup/aenv" : "/sys/fs/cgroup/cpuacct/aenv";
  return existsSync(root) && readdirSync(root).some((d) => d.startsWith(id));
}

function savedCount(id: string): number {
  return server
    .logs()
    .split("\n")
    .filter((l) => l.includes(id) && l.includes("idle sandbox saved to disk")).length;
}

async function listedRunning(id: string): Promise<boolean> {
  const r = await server.api("GET", "/v2/sandboxes?state=running");
  return (r.body as Array<{ sandboxID: string; state: string }>).some(
    (s) => s.sandboxID === id && s.state === "running",
  );
}

test("an idle sandbox is saved to disk, still shows running with its TTL, and comes back whole on its next use", async () => {
  const s = await Sandbox.create({ timeoutMs: 600_000 });
  try {
    await s.files.write("/home/user/kept.txt", "on disk and in memory");
    // A process holding state in memory only (its PID and a random value it printed).
    await s.commands.run(
      `nohup python3 -c "import os,time; v=os.urandom(8).hex(); open('/tmp/v','w').write(v); b=os.urandom(4<<20); time.sleep(1e9)" >/dev/null 2>&1 & echo $! > /tmp/pid; sleep 0.5`,
    );
    const before_ = await Sandbox.getInfo(s.sandboxId);
    await waitFor("the save", () => savedCount(s.sandboxId) === 1);
    await waitFor("the runtime gone", () => !hasRuntime(s.sandboxId));

    const info = await Sandbox.getInfo(s.sandboxId);
    assert.equal(info.state, "running", "saved by idleness, it is running to its client");
    assert.equal(info.endAt.getTime(), before_.endAt.getTime(), "its TTL runs on, unchanged");
    assert.ok(await listedRunning(s.sandboxId), "listed among running sandboxes");
    assert.ok(!hasRuntime(s.sandboxId), "reads (getInfo, list) do not bring it back");

    // envd traffic brings it back: same processes, same memory, same files.
    const r = await s.commands.run('kill -0 "$(cat /tmp/pid)" && echo alive');
    assert.equal(r.stdout, "alive\n");
    assert.equal(await s.files.read("/home/user/kept.txt"), "on disk and in memory");
    assert.match(await s.files.read("/tmp/v"), /^[0-9a-f]{16}$/);
    assert.ok(hasRuntime(s.sandboxId));
    const back = await Sandbox.getInfo(s.sandboxId);
    assert.equal(back.state, "running");
    assert.equal(back.endAt.getTime(), before_.endAt.getTime(), "a transparent resume does not extend the TTL");
    // Idle again, saved again.
    await waitFor("the second save", () => savedCount(s.sandboxId) === 2);
  } finally {
    await s.kill();
  }
});

test("a client's pause of a saved sandbox keeps its image; kill and fork work on one without a resume", async () => {
  const a = await Sandbox.create({ timeoutMs: 600_000 });
  const b = await Sandbox.create({ timeoutMs: 600_000 });
  try {
    await a.files.write("/home/user/a.txt", "a");
    await b.files.write("/home/user/b.txt", "b");
    await waitFor("both saved", () => savedCount(a.sandboxId) === 1 && savedCount(b.sandboxId) === 1);
    await waitFor("both runtimes gone", () => !hasRuntime(a.sandboxId) && !hasRuntime(b.sandboxId));

    await a.pause();
    assert.equal((await Sandbox.getInfo(a.sandboxId)).state, "paused", "the client's pause now");
    assert.ok(!hasRuntime(a.sandboxId), "pausing a saved sandbox does not restore it");
    assert.ok(!(await listedRunning(a.sandboxId)));

    const [child] = await b.fork();
    assert.ok(child instanceof Sandbox);
    assert.equal(await child.files.read("/home/user/b.txt"), "b");
    await child.kill();
    assert.ok(!hasRuntime(b.sandboxId), "the saved parent stays saved");
    assert.equal((await Sandbox.getInfo(b.sandboxId)).state, "running");
    assert.equal(await b.kill(), true);
    await assert.rejects(Sandbox.getInfo(b.sandboxId));

    const back = await Sandbox.connect(a.sandboxId);
    assert.equal(await back.files.read("/home/user/a.txt"), "a");
  } finally {
    await Promise.all([a.kill().catch(() => {}), b.kill().catch(() => {})]);
  }
});

test("a saved sandbox survives a server restart, takes a new timeout, and its TTL expiry makes it paused", async () => {
  const s = await Sandbox.create({ timeoutMs: 600_000 });
  try {
    await s.files.write("/home/user/ttl.txt", "kept");
    await waitFor("the save", () => savedCount(s.sandboxId) === 1);
    await waitFor("the runtime gone", () => !hasRuntime(s.sandboxId));
    await server.stop();
    server = await server.restart();
    useE2b(server);
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "running", "still saved and running after a restart");
    // A new timeout counts from now, as for a running sandbox, and does not wake it.
    await s.setTimeout(6_000);
    const info = await Sandbox.getInfo(s.sandboxId);
    assert.ok(Math.abs(info.endAt.getTime() - (Date.now() + 6_000)) < 3_000, "endAt follows setTimeout");
    assert.ok(!hasRuntime(s.sandboxId));
    await untilLogLine(server, [s.sandboxId, "sandbox saved by hibernation now paused"], 30_000);
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused", "its TTL ran out: now the client's pause");
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal(await back.files.read("/home/user/ttl.txt"), "kept");
  } finally {
    await s.kill().catch(() => {});
  }
});

test("a sandbox holding a TCP connection to outside it stays frozen in memory, and is saved once it is closed", async () => {
  const s = await Sandbox.create({ timeoutMs: 600_000 });
  let sock: Socket | undefined;
  try {
    await s.commands.run("nohup python3 -m http.server 8000 --directory /tmp >/dev/null 2>&1 & sleep 0.5");
    // The sandbox's address on the host: its slot's /30 holds the host end (.1, whence envd's
    // calls come, as this very command's connection shows) and the sandbox (.2).
    const ip = (
      await s.commands.run(
        `python3 -c "import socket; r=[l.split()[2] for l in open('/proc/net/tcp') if l.split()[1].endswith(':C33F') and l.split()[3]=='01'][0].split(':')[0]; n=int.from_bytes(bytes.fromhex(r)[::-1], 'big') + 1; print(socket.inet_ntoa(n.to_bytes(4, 'big')))"`,
      )
    ).stdout.trim();
    // Straight from the host to the sandbox's address, past the proxy: nothing on our side
    // knows about this connection, only the sandbox's kernel does.
    const conn = connect(8000, ip);
    sock = conn;
    await new Promise<void>((res, rej) => conn.once("connect", res).once("error", rej));
    await untilLogLine(server, [s.sandboxId, "idle sandbox kept in memory"], 30_000);
    assert.equal(savedCount(s.sandboxId), 0);
    assert.ok(hasRuntime(s.sandboxId));
    conn.destroy();
    await waitFor("the save once the connection is closed", () => savedCount(s.sandboxId) === 1);
    assert.equal((await s.commands.run("echo back")).stdout, "back\n");
  } finally {
    sock?.destroy();
    await s.kill();
  }
});
