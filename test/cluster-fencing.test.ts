// A node's heartbeat and its lease against a real redis-server, reached through a TCP relay
// that the test can cut (packets dropped, connections kept: a partition, not a crash) and
// heal. While cut off the node's lease lapses (it must then resume nothing); the first beat
// after the heal passes every route, finds the sandboxes another live node took over and hands
// them to the node to drop, and re-announces those nobody took.
import assert from "node:assert/strict";
import type { ChildProcess } from "node:child_process";
import { after, before, test } from "node:test";
import type { NodeInfo } from "@aenv/edge/cluster-keys";
import { Redis } from "ioredis";
import pino from "pino";
import { NodeAgent } from "../packages/server/src/cluster/node-agent.js";
import { startRedis } from "./helpers/cluster.js";
import { Relay } from "./helpers/relay.js";
import { freePort, waitFor } from "./helpers/server.js";

let redis: ChildProcess;
let port = 0;
let direct: Redis;
const relay = new Relay();

before(async () => {
  port = await freePort();
  redis = await startRedis(port);
  direct = new Redis(port, "127.0.0.1");
  await relay.start(port);
});

after(() => {
  direct.disconnect();
  relay.close();
  redis.kill("SIGKILL");
});

const info = { checkpointKey: "k", url: "http://a", status: "ready" } as unknown as Omit<NodeInfo, "updatedAt">;

test("a cut-off node's lease lapses; after the heal it drops what another node took and re-announces the rest", async () => {
  const client = new Redis(relay.port, "127.0.0.1", { maxRetriesPerRequest: 2 });
  client.on("error", () => {});
  const handed: Array<Map<string, string>> = [];
  const logs: string[] = [];
  const log = pino({ level: "info" }, { write: (line: string) => logs.push(line) });
  const agent = new NodeAgent({
    redis: client,
    nodeId: "node-a",
    describe: () => info,
    owned: () => ["s-moved", "s-kept", "s-lost"],
    superseded: async (moved) => {
      handed.push(moved);
    },
    log,
  });
  try {
    assert.equal(agent.leaseCurrent(), false, "no lease before the first beat");
    await agent.start();
    assert.equal(agent.leaseCurrent(), true, "a beat gives the lease");
    for (const id of ["s-moved", "s-kept", "s-lost"]) assert.equal(await direct.get(`aenv:sbx:${id}`), "node-a");

    relay.cut("drop");
    const cutAt = Date.now();
    await waitFor("the lease to lapse", () => !agent.leaseCurrent(), 15_000);
    const lapsedAfter = Date.now() - cutAt;
    assert.ok(lapsedAfter <= 6_000 + 500, `lapsed ${lapsedAfter} ms after the cut, within the node TTL`);
    // The lease lapses no later than the node key expires: no gateway can have counted the
    // node dead while it still thought its lease current.
    for (let i = 0; i < 40 && (await direct.exists("aenv:node:node-a")); i++)
      await new Promise((r) => setTimeout(r, 200));
    assert.equal(await direct.exists("aenv:node:node-a"), 0, "the node key expired");

    // Meanwhile node B (alive) resumed s-moved, and s-lost's route was lost (a Redis failover).
    await direct.set("aenv:node:node-b", JSON.stringify({ nodeID: "node-b" }), "PX", 60_000);
    await direct.set("aenv:sbx:s-moved", "node-b");
    await direct.del("aenv:sbx:s-lost");

    relay.heal();
    await waitFor("the lease to be renewed", () => agent.leaseCurrent(), 30_000);
    await waitFor("the superseded sandboxes to be handed over", () => handed.length > 0, 10_000);
    assert.deepEqual([...(handed[0] ?? new Map())], [["s-moved", "node-b"]], "only the one another live node took");
    assert.equal(await direct.get("aenv:sbx:s-moved"), "node-b", "never taken back from a live node");
    assert.equal(await direct.get("aenv:sbx:s-kept"), "node-a", "still its own");
    assert.equal(await direct.get("aenv:sbx:s-lost"), "node-a", "a route nobody holds is re-announced");
    assert.ok(
      logs.some((l) => l.includes("cluster lease lapsed")) && logs.some((l) => l.includes("lease renewed")),
      "the lapse and the renewal are logged",
    );
  } finally {
    await agent.stop();
    client.disconnect();
  }
});

test("a route that names a dead node is taken back by the next full beat; a live owner's never", async () => {
  const client = new Redis(port, "127.0.0.1");
  const handed: Array<Map<string, string>> = [];
  await direct.set("aenv:sbx:x-dead", "node-gone");
  await direct.set("aenv:node:node-c", JSON.stringify({ nodeID: "node-c" }), "PX", 60_000);
  await direct.set("aenv:sbx:x-live", "node-c");
  const agent = new NodeAgent({
    redis: client,
    nodeId: "node-d",
    describe: () => info,
    owned: () => ["x-dead", "x-live"],
    superseded: async (moved) => {
      handed.push(moved);
    },
    log: pino({ level: "silent" }),
  });
  try {
    await agent.beat();
    assert.equal(await direct.get("aenv:sbx:x-dead"), "node-d");
    assert.equal(await direct.get("aenv:sbx:x-live"), "node-c");
    await agent.settled();
    assert.deepEqual([...(handed[0] ?? new Map())], [["x-live", "node-c"]]);
  } finally {
    await agent.stop();
    client.disconnect();
  }
});
