// A rolling upgrade, with real node, gateway and Redis processes on the simulated runtime
// (runtime.driver = sim; AENV_SIM_VERSION stands for the runsc build, i.e. the checkpoint key).
// Node A (build sim-1) is drained with SIGTERM and comes back on build sim-2 beside node B
// (sim-2): the sandboxes paused under sim-1 resume on no node of another build, and connect says
// why with a 503; once a node on sim-1 joins they resume there, each once.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { API_KEY, TestCluster, via } from "./helpers/cluster.js";
import { cleanupDataDir, type TestServer } from "./helpers/server.js";

const cluster = new TestCluster(process.env.AENV_TEST_UPGRADE_PREFIX ?? "pu");
let gateway = "";
const sim = (slotOctet: number) => ({ sim: { slotOctet } });
const node = (id: string, build: string, octet: number) =>
  cluster.startNode(id, { AENV_SIM_VERSION: build, AENV_LOG_LEVEL: "warn" }, sim(octet));

before(async () => {
  await cluster.start();
  await node("node-a", "sim-1", 233);
  gateway = await cluster.startGateway();
});

after(() => cluster.close());

async function connect(id: string) {
  const r = await fetch(`${gateway}/sandboxes/${id}/connect`, {
    method: "POST",
    headers: { "x-api-key": API_KEY, "content-type": "application/json" },
    body: JSON.stringify({ timeout: 60 }),
  });
  return { status: r.status, body: (await r.json()) as { code: number; message: string } };
}

test("after a drain and an upgrade, pauses of the old build resume only on a node of that build", async () => {
  const paused = await Sandbox.create(via(gateway));
  const running = await Sandbox.create(via(gateway));
  await paused.pause();
  const b = await node("node-b", "sim-2", 234);

  // Drain A (SIGTERM): it pauses the running one, commits both, leaves.
  const oldA = cluster.nodes.get("node-a") as TestServer;
  await oldA.stop();
  assert.equal(oldA.proc.exitCode, 0, oldA.logs().slice(-2000));
  cleanupDataDir(oldA);
  // A comes back upgraded (sim-2), as a node that forgot its sandboxes at the drain.
  const a = await node("node-a", "sim-2", 233);

  for (const s of [paused, running]) {
    const r = await connect(s.sandboxId);
    assert.equal(r.status, 503, JSON.stringify(r.body));
    assert.equal(r.body.code, 503);
    assert.match(r.body.message, /paused under runtime 'sim-1[^']*' and no ready node runs it/);
    for (const n of [a, b]) assert.equal((await n.api("GET", `/sandboxes/${s.sandboxId}`)).status, 404);
  }

  const c = await node("node-c", "sim-1", 235);
  for (const s of [paused, running]) {
    const back = await Sandbox.connect(s.sandboxId, via(gateway));
    assert.equal(await cluster.ownerOf(s.sandboxId), "node-c");
    assert.equal((await back.commands.run("true")).exitCode, 0);
    assert.equal((await c.api("GET", `/sandboxes/${s.sandboxId}`)).status, 200);
    for (const n of [a, b]) assert.equal((await n.api("GET", `/sandboxes/${s.sandboxId}`)).status, 404);
  }
  const listed = (await (
    await fetch(`${gateway}/v2/sandboxes`, { headers: { "x-api-key": API_KEY } })
  ).json()) as Array<{
    sandboxID: string;
  }>;
  const ids = listed.map((x) => x.sandboxID).sort();
  assert.deepEqual(ids, [paused.sandboxId, running.sandboxId].sort(), "each listed once");
  await Promise.all([paused, running].map((s) => Sandbox.kill(s.sandboxId, via(gateway))));
});
