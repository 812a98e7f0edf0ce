// State survives the server: after a SIGKILL of the server, running sandboxes are taken over
// again by the next start, paused ones stay resumable, and dead ones are reported and cleaned
// up, leaving no runsc sandboxes, namespaces or links behind.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { counterLoop, untilTrue } from "./helpers/sandbox.js";
import {
  cleanupDataDir,
  startServer,
  TEMPLATES_DIR,
  type TestServer,
  untilCommitted,
  useE2b,
} from "./helpers/server.js";

function runscIds(dataDir: string): string[] {
  const out = execFileSync("runsc", [`--root=${dataDir}/runsc`, "list", "-quiet"], { encoding: "utf8" });
  return out.split("\n").filter(Boolean).sort();
}

// This file's servers' namespaces only (helpers/server.ts names them): another test file on
// the host runs with a prefix of its own.
const NET_PREFIX = process.env.AENV_TEST_NET_PREFIX ?? "aet";

function netns(): string[] {
  return execFileSync("ip", ["netns", "list"], { encoding: "utf8" })
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter((n) => n.startsWith(`${NET_PREFIX}-`) && /^[rs]\d+$/.test(n.slice(NET_PREFIX.length + 1)));
}

test("a server crash loses nothing: running sandboxes are adopted, paused stay paused, dead ones are cleaned up", async () => {
  const first = await startServer();
  useE2b(first);
  const alive = await Sandbox.create();
  const paused = await Sandbox.create();
  const doomed = await Sandbox.create();
  await alive.commands.run("bash -c 'echo before-crash > /tmp/mark'");
  await paused.files.write("/home/user/p.txt", "paused-data");
  await paused.pause();
  const snap = await alive.createSnapshot();
  // Committed to the repository in the background: wait for it (the test removes the local copy).
  await untilCommitted(first, snap.snapshotId);
  const counter = await alive.commands.run(counterLoop("/tmp/c"), {
    background: true,
    timeoutMs: 0,
  });
  assert.ok(counter.pid > 0);
  // Taken just before the crash: its commit may not have finished; the restart finishes it.
  const late = await alive.createSnapshot();
  await first.crash();
  // The doomed sandbox dies while no server is watching.
  const doomedRuntime = runscIds(first.dataDir).find((id) => id.startsWith(doomed.sandboxId));
  assert.ok(doomedRuntime);
  const state = JSON.parse(
    execFileSync("runsc", [`--root=${first.dataDir}/runsc`, "state", doomedRuntime], { encoding: "utf8" }),
  );
  process.kill(state.pid, "SIGKILL");

  const second = await first.restart();
  try {
    const details = await second.api("GET", "/health/details");
    const rec = (details.body as { recovery: { adopted: string[]; paused: string[]; cleanedUp: string[] } }).recovery;
    assert.deepEqual(rec.adopted, [alive.sandboxId]);
    assert.deepEqual(rec.paused, [paused.sandboxId]);
    assert.deepEqual(rec.cleanedUp, [doomed.sandboxId]);
    // The adopted sandbox is reachable, with its processes still running.
    const a = await Sandbox.connect(alive.sandboxId);
    assert.equal((await a.commands.run("cat /tmp/mark")).stdout, "before-crash\n");
    const c1 = Number((await a.commands.run("cat /tmp/c")).stdout);
    await untilTrue(a, `[ "$(cat /tmp/c)" -gt ${c1} ]`, 10);
    // The paused one resumes with its files.
    const p = await Sandbox.connect(paused.sandboxId);
    assert.equal(await p.files.read("/home/user/p.txt"), "paused-data");
    assert.equal(await Sandbox.kill(doomed.sandboxId), false);
    // Snapshots live in the repository; the node-local copy is only a cache.
    rmSync(join(second.dataDir, "snapshots", snap.snapshotId), { recursive: true, force: true });
    await untilCommitted(second, late.snapshotId);
    await Sandbox.deleteSnapshot(late.snapshotId);
    const listed = await Sandbox.listSnapshots().nextItems();
    assert.deepEqual(
      listed.map((x) => x.snapshotId),
      [snap.snapshotId],
    );
    const fromSnap = await Sandbox.create(snap.snapshotId);
    assert.equal((await fromSnap.commands.run("cat /tmp/mark")).stdout, "before-crash\n");
    await fromSnap.kill();
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
    await a.kill();
    await p.kill();
  } finally {
    await second.stop();
    cleanupDataDir(second);
  }
  assert.deepEqual(runscIds(second.dataDir), []);
  assert.deepEqual(netns(), []);
});

test("at start, warm images of other runtime builds unused for a day, and half-written ones, are removed", async () => {
  const warm = join(TEMPLATES_DIR, ".warm");
  mkdirSync(warm, { recursive: true });
  const day = 24 * 3600;
  const recent = readdirSync(warm).filter((n) => Date.now() - statSync(join(warm, n)).mtimeMs < (day - 600) * 1000);
  const tag = `prunetest${process.pid}`;
  const make = (name: string, ageS: number) => {
    const p = join(warm, name);
    mkdirSync(p);
    writeFileSync(join(p, "checkpoint.img"), "x");
    const t = new Date(Date.now() - ageS * 1000);
    utimesSync(p, t, t);
    return p;
  };
  const old = make(`${tag}-r1-0.0-systrap-otherbuild`, 2 * day);
  const fresh = make(`${tag}-r2-0.0-systrap-otherbuild`, 60);
  const partial = make(`${tag}-r1-0.0-systrap-otherbuild.tmp-4242`, 2 * 3600);
  const server = await startServer();
  try {
    const deadline = Date.now() + 20_000;
    while ((existsSync(old) || existsSync(partial)) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    assert.ok(!existsSync(old), "an old image of another build is removed");
    assert.ok(!existsSync(partial), "a half-written capture is removed");
    assert.ok(existsSync(fresh), "a recently used image of another build is kept");
    for (const n of recent) assert.ok(existsSync(join(warm, n)), `${n} kept`);
  } finally {
    await server.stop();
    cleanupDataDir(server);
    rmSync(fresh, { recursive: true, force: true });
  }
});

test("a second server with a running server's network prefix or slot range refuses to start; the first keeps serving", async () => {
  const first = await startServer();
  useE2b(first);
  const sbx = await Sandbox.create();
  try {
    const net = { AENV_NET_PREFIX: NET_PREFIX, AENV_SLOT_CIDR: process.env.AENV_TEST_SLOT_CIDR ?? "10.202.0.0/16" };
    for (const env of [net, { ...net, AENV_NET_PREFIX: "aez" }, { ...net, AENV_SLOT_CIDR: "10.238.0.0/16" }]) {
      await assert.rejects(startServer({ env }), (e: Error) => {
        assert.match(e.message, /in use by another server on this host \(pid \d+\)/);
        return true;
      });
    }
    // Had it started, it would have removed the first's namespaces: the sandbox still answers.
    assert.equal((await sbx.commands.run("echo alive")).stdout, "alive\n");
  } finally {
    await sbx.kill();
    await first.stop();
    cleanupDataDir(first);
  }
});

test("auto keeps a data dir on the gVisor platform its images were made on; a new one records what it measured", async () => {
  const platformOf = async (s: TestServer) =>
    ((await s.api("GET", "/health/details")).body as { runtime: { platform: string } }).runtime.platform;
  const fresh = await startServer();
  let measured: string;
  try {
    measured = await platformOf(fresh);
    assert.ok(["systrap", "ptrace"].includes(measured), measured);
    assert.equal(readFileSync(join(fresh.dataDir, "runtime-platform"), "utf8"), `${measured}\n`);
  } finally {
    await fresh.stop();
    cleanupDataDir(fresh);
  }
  // A data dir that recorded the other platform keeps it, whatever this host measures.
  const other = measured === "ptrace" ? "systrap" : "ptrace";
  const recorded = mkdtempSync("/var/tmp/aenv-test-");
  writeFileSync(join(recorded, "runtime-platform"), `${other}\n`);
  // One from before the record, with state: what auto chose then, the first platform that starts.
  const legacy = mkdtempSync("/var/tmp/aenv-test-");
  writeFileSync(join(legacy, "state.db"), "");
  for (const [dataDir, want] of [
    [recorded, other],
    [legacy, "systrap"],
  ] as const) {
    const s = await startServer({ dataDir });
    try {
      assert.equal(await platformOf(s), want, dataDir);
      assert.equal(readFileSync(join(dataDir, "runtime-platform"), "utf8"), `${want}\n`);
    } finally {
      await s.stop();
      cleanupDataDir(s);
    }
  }
});
