// A cluster whose Redis is highly available: a primary, a replica and three sentinels (real
// redis-server processes on free loopback ports), a node and a gateway that reach it only
// through the sentinels, and the unmodified e2b SDK. The primary is killed -9 while creates go
// on: each create either succeeds or is refused with a 503, creates succeed again once a
// sentinel promoted the replica, and the gateway's list is exactly the sandboxes whose
// create succeeded, each once and each working.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Sandbox, ServiceBusyError } from "e2b";
import { TestCluster, via } from "./helpers/cluster.js";

const cluster = new TestCluster();
let gateway = "";

before(async () => {
  await cluster.start({ sentinel: true });
  await cluster.startNode("node-s", {
    AENV_MAX_SANDBOXES: "8",
    AENV_NET_PREFIX: process.env.AENV_TEST_NET_PREFIX ?? "aeh",
    AENV_SLOT_CIDR: process.env.AENV_TEST_SLOT_CIDR ?? "10.230.0.0/16",
  });
  gateway = await cluster.startGateway();
});

after(() => cluster.close());

const METADATA = { run: "sentinel" };

/** One create through the gateway: its sandbox, or the 503 it was refused with. */
async function tryCreate(): Promise<{ sandbox: Sandbox } | { refused: Error }> {
  try {
    return { sandbox: await Sandbox.create({ ...via(gateway), metadata: METADATA }) };
  } catch (err) {
    // Anything but a 503 (a 500, a 429, a timeout) fails the test here, with its message.
    assert.ok(err instanceof ServiceBusyError, `a create failed with something other than a 503: ${err}`);
    return { refused: err };
  }
}

test("creates keep working across a Sentinel failover (primary killed -9); the list is exactly what was created", async () => {
  const sentinel = cluster.sentinel;
  assert.ok(sentinel);
  const created: Sandbox[] = [];
  try {
    // Through the sentinels, before anything fails.
    for (let i = 0; i < 2; i++) {
      const r = await tryCreate();
      assert.ok("sandbox" in r, "creates succeed while the primary is up");
      created.push(r.sandbox);
    }
    assert.equal(await cluster.ownerOf(created[0]?.sandboxId as string), "node-s");

    sentinel.killPrimary();
    const failedOver = sentinel.untilFailedOver();
    let done = false;
    void failedOver.then(() => (done = true));
    // Creates all through the failover, one after another; stop once two succeeded after the
    // sentinels agreed on the new primary.
    const refusals: string[] = [];
    let afterFailover = 0;
    const deadline = Date.now() + 90_000;
    while (afterFailover < 2) {
      assert.ok(
        Date.now() < deadline,
        `creates did not come back after the failover (refusals: ${refusals.join(" | ")})`,
      );
      const wasDone = done;
      const r = await tryCreate();
      if ("sandbox" in r) {
        created.push(r.sandbox);
        if (wasDone) afterFailover++;
      } else {
        refusals.push(r.refused.message);
        await new Promise((res) => setTimeout(res, 200));
      }
    }
    await failedOver;
    for (const m of refusals) assert.match(m, /Redis|no node is ready/, "a refusal says why");
    console.log(
      `# ${created.length} created, ${refusals.length} refused (503) during the failover: ${[...new Set(refusals)].join(" | ")}`,
    );

    // Exactly the sandboxes created: none missing, none twice, none extra.
    const ids = created.map((s) => s.sandboxId).sort();
    assert.equal(new Set(ids).size, ids.length, "every create made a new sandbox");
    const listed = await Sandbox.list({ ...via(gateway), query: { metadata: METADATA } }).nextItems();
    assert.deepEqual(listed.map((s) => s.sandboxId).sort(), ids);
    // Each is routed (routes the failover lost are written again by the node's beats) and runs.
    for (const s of created) {
      assert.equal(await cluster.ownerOf(s.sandboxId), "node-s", `${s.sandboxId} routed to its node`);
      const c = await Sandbox.connect(s.sandboxId, via(gateway));
      assert.equal((await c.commands.run(`echo ${s.sandboxId}`)).stdout, `${s.sandboxId}\n`);
    }
    const logs = cluster.gateways[0]?.logs() ?? "";
    assert.doesNotMatch(logs, /BUG|"level":50/, "the gateway treated the outage as an outage, not an error");
    assert.ok(
      /"msg":"redis"/.test(logs),
      "the gateway logged the lost connection (it went through the failover, not around it)",
    );
  } finally {
    await Promise.all(created.map((s) => Sandbox.kill(s.sandboxId, via(gateway)).catch(() => false)));
  }
  const left = await Sandbox.list({ ...via(gateway), query: { metadata: METADATA } }).nextItems();
  assert.equal(left.length, 0, "all killed through the gateway");
});
