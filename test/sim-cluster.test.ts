// A node on the simulated runtime (runtime.driver = sim) behind a real gateway and Redis, driven
// by the unmodified e2b SDK: create, commands.run, list, pause and connect, kill. What is
// simulated is the sandbox alone (a record and an envd stand-in on a loopback address); the
// node, the gateway and the repository are the real ones, so this is what bench/cluster-scale.ts
// runs fifty of.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { CommandExitError, Sandbox } from "e2b";
import { TestCluster, via } from "./helpers/cluster.js";

/** The loopback range follows this run's slot range (10.X.0.0/16 → 127.X.0.0/16). */
const octet = Number(/^\d+\.(\d+)\./.exec(process.env.AENV_TEST_SLOT_CIDR ?? "")?.[1] ?? 202);
const cluster = new TestCluster(process.env.AENV_TEST_NET_PREFIX ?? "aet");
let gw = "";

before(async () => {
  await cluster.start();
  await cluster.startNode("sim-a", { AENV_LOG_LEVEL: "warn" }, { sim: { slotOctet: octet } });
  gw = await cluster.startGateway();
});

after(() => cluster.close());

describe("a simulated node behind the gateway", () => {
  test("the e2b SDK creates, runs commands in, lists and kills a simulated sandbox", async () => {
    const s = await Sandbox.create(via(gw));
    assert.equal(await cluster.ownerOf(s.sandboxId), "sim-a");
    const ok = await s.commands.run("true");
    assert.equal(ok.exitCode, 0);
    assert.equal((await s.commands.run("echo hi there")).stdout, "hi there\n");
    await assert.rejects(s.commands.run("false"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 1);
    const listed = await Sandbox.list(via(gw)).nextItems();
    assert.ok(
      listed.some((i) => i.sandboxId === s.sandboxId && i.state === "running"),
      "listed as running",
    );
    await s.kill();
    const after = await Sandbox.list(via(gw)).nextItems();
    assert.ok(!after.some((i) => i.sandboxId === s.sandboxId), "gone from the list once killed");
    await assert.rejects(Sandbox.connect(s.sandboxId, via(gw)));
  });

  test("a paused simulated sandbox is resumed by connect and answers again", async () => {
    const s = await Sandbox.create(via(gw));
    await s.pause();
    const listed = await Sandbox.list({ ...via(gw), query: { state: ["paused"] } }).nextItems();
    assert.ok(
      listed.some((i) => i.sandboxId === s.sandboxId),
      "listed as paused",
    );
    const back = await Sandbox.connect(s.sandboxId, via(gw));
    assert.equal((await back.commands.run("true")).exitCode, 0);
    await back.kill();
  });
});
