// Hibernation: an idle sandbox is frozen in place and thawed by its next use,
// invisibly to the client; one that computes, has a client stream open or opted out is not.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { request } from "node:http";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import {
  afterSweeps,
  cleanupDataDir,
  startServer,
  type TestServer,
  untilLogLine,
  useE2b,
  waitFor,
} from "./helpers/server.js";

let server: TestServer;
const V2 = existsSync("/sys/fs/cgroup/cgroup.controllers");

before(async () => {
  // debug: the test reads the server's log for the heap reduce before a freeze.
  server = await startServer({ env: { AENV_HIBERNATE_AFTER: "2", AENV_LOG_LEVEL: "debug" } });
  useE2b(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
});

/** The host's view: whether the sandbox's cgroup is frozen now, and its CPU time. */
function cgroupOf(id: string): { frozen: () => boolean; cpuNs: () => number } {
  const root = V2 ? "/sys/fs/cgroup/aenv" : "/sys/fs/cgroup/freezer/aenv";
  const dir = () => readdirSync(root).find((d) => d.startsWith(id));
  const file = (ctl: string, v1: string, v2: string) =>
    V2 ? `/sys/fs/cgroup/aenv/${dir()}/${v2}` : `/sys/fs/cgroup/${ctl}/aenv/${dir()}/${v1}`;
  return {
    frozen: () =>
      V2
        ? /^frozen 1$/m.test(readFileSync(file("", "", "cgroup.events"), "utf8"))
        : readFileSync(file("freezer", "freezer.state", ""), "utf8").trim() === "FROZEN",
    cpuNs: () =>
      V2
        ? Number(/usage_usec (\d+)/.exec(readFileSync(file("", "", "cpu.stat"), "utf8"))?.[1]) * 1000
        : Number(readFileSync(file("cpuacct", "cpuacct.usage", ""), "utf8")),
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("an idle sandbox is frozen, uses no CPU, shows as running, and its next use thaws it", async () => {
  const s = await Sandbox.create();
  try {
    // A timer inside, due while the sandbox will be frozen; started detached (no client stream).
    await s.commands.run("nohup sh -c 'sleep 4; echo fired > /tmp/timer' >/dev/null 2>&1 &");
    const timerDue = Date.now() + 4000;
    await s.commands.run(
      "nohup python3 -m http.server 8000 --directory /tmp >/dev/null 2>&1 & sleep 0.5; echo hello > /tmp/page",
    );
    const cg = cgroupOf(s.sandboxId);
    await waitFor("hibernation", cg.frozen, 15_000);
    // The freeze's log line can reach the test after the cgroup shows frozen (a pipe).
    await untilLogLine(server, [s.sandboxId, '"sandbox hibernated"']);
    // Right before the freeze envd gave back what its runtime held beyond its live objects.
    const mine = server
      .logs()
      .split("\n")
      .filter((l) => l.includes(s.sandboxId));
    const reduced = mine.findIndex((l) => l.includes('"envd heap reduced"'));
    const frozen = mine.findIndex((l) => l.includes('"sandbox hibernated"'));
    assert.ok(
      reduced >= 0 && reduced < frozen,
      `envd's heap reduced before the sandbox was frozen; its log:\n${mine.filter((l) => /heap|hibernat|pool/.test(l)).join("\n")}`,
    );
    const before_ = cg.cpuNs();
    await sleep(1500);
    assert.equal(cg.cpuNs(), before_, "a frozen sandbox uses no CPU at all");
    const info = await Sandbox.getInfo(s.sandboxId);
    assert.equal(info.state, "running");
    // aenv's own fields say it is hibernated, and where (the dashboard shows them).
    const listed = (await server.api("GET", "/v2/sandboxes")).body as Array<{
      sandboxID: string;
      state: string;
      hibernation?: string;
      nodeID?: string;
    }>;
    const mineListed = listed.find((x) => x.sandboxID === s.sandboxId);
    assert.deepEqual([mineListed?.state, mineListed?.hibernation], ["running", "frozen"]);
    assert.ok(mineListed?.nodeID, "the list names the node");
    const m = await s.getMetrics();
    assert.ok(m.length >= 1);
    assert.ok(cg.frozen(), "API reads (getInfo, metrics) do not thaw it");
    // Until the timer inside falls due, the sandbox still frozen.
    await sleep(Math.max(0, timerDue - Date.now()));
    assert.ok(cg.frozen(), "still frozen when its timer fell due");
    // envd traffic thaws it; the timer that fell due meanwhile fires.
    assert.equal((await s.commands.run("echo awake")).stdout, "awake\n");
    assert.ok(!cg.frozen());
    const t = await s.commands.run(
      "for i in $(seq 50); do [ -f /tmp/timer ] && break; sleep 0.1; done; cat /tmp/timer",
    );
    assert.equal(t.stdout, "fired\n");
    // Application traffic through the proxy thaws it too.
    await waitFor("hibernation again", cg.frozen, 15_000);
    const body = await new Promise<string>((resolve, reject) => {
      const r = request(`http://127.0.0.1:${server.port}/proxy/${s.sandboxId}/8000/page`, { headers: {} }, (res) => {
        let b = "";
        res.on("data", (d: Buffer) => (b += d.toString()));
        res.on("end", () => resolve(b));
      });
      r.on("error", reject);
      r.end();
    });
    assert.equal(body, "hello\n");
  } finally {
    await s.kill();
  }
});

test("a sandbox that computes, keeps a client stream open or opts out is never frozen", async () => {
  const busy = await Sandbox.create();
  const streaming = await Sandbox.create();
  const optOut = await Sandbox.create({ metadata: { "aenv.hibernate": "off" } });
  try {
    await busy.commands.run("nohup python3 -c 'while True: pass' >/dev/null 2>&1 &");
    const run = streaming.commands.run("sleep 7; echo done", { timeoutMs: 20_000 });
    const cgs = [busy, streaming, optOut].map((s) => cgroupOf(s.sandboxId));
    // Sweeps come every idle time / 4: six cover the idle time and two chances past it.
    await afterSweeps(server.url, "hibernation", 6, () => {
      for (const [n, cg] of cgs.entries()) assert.ok(!cg.frozen(), `sandbox ${n} must not be frozen`);
    });
    assert.equal((await run).stdout, "done\n");
    // Once its stream ended, the streaming one is idle like any other.
    await waitFor("hibernation after the stream", cgs[1]?.frozen ?? (() => false), 15_000);
    assert.ok(!cgs[2]?.frozen());
  } finally {
    await Promise.all([busy.kill(), streaming.kill(), optOut.kill()]);
  }
});

test("pause, snapshot, fork and kill work on a frozen sandbox", async () => {
  const s = await Sandbox.create();
  try {
    await s.files.write("/tmp/state", "kept");
    const cg = cgroupOf(s.sandboxId);
    await waitFor("hibernation", cg.frozen, 15_000);
    const snap = await s.createSnapshot();
    await waitFor("hibernation after the snapshot", cg.frozen, 15_000);
    const [child] = await s.fork();
    assert.ok(child instanceof Sandbox);
    assert.equal(await child.files.read("/tmp/state"), "kept");
    await child.kill();
    await waitFor("hibernation after the fork", cg.frozen, 15_000);
    await s.pause();
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal(await back.files.read("/tmp/state"), "kept");
    const fromSnap = await Sandbox.create(snap.snapshotId);
    assert.equal(await fromSnap.files.read("/tmp/state"), "kept");
    await waitFor("hibernation of the new one", cgroupOf(fromSnap.sandboxId).frozen, 15_000);
    assert.equal(await fromSnap.kill(), true);
    await Sandbox.deleteSnapshot(snap.snapshotId);
  } finally {
    await s.kill();
  }
});
