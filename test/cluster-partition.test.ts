// A partition, with real processes on "hosts" (helpers/hosts.ts): Redis, two nodes and a
// gateway each in a network namespace of its own on a bridge. Node A, holding a running
// sandbox and two paused ones, is cut off from Redis and the gateway (nftables drops, its
// processes live; the shared repository stays reachable). After its heartbeat expires the
// gateway reports the running sandbox unreachable (503, not 404), A refuses to resume anything
// (its lease lapsed), and a connect through the gateway resumes one paused sandbox on node B,
// memory and files intact, exactly once. After the heal A drops its copy of the moved sandbox,
// serves its running one again, re-announces the paused one nobody took, and no sandbox is
// served by two nodes; no paused image is lost.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { Redis } from "ioredis";
import { API_KEY, TestCluster, via } from "./helpers/cluster.js";
import { Hosts } from "./helpers/hosts.js";
import type { TestServer } from "./helpers/server.js";

const hosts = new Hosts(process.env.AENV_TEST_HOSTS_PREFIX ?? "pph", process.env.AENV_TEST_HOSTS_SUBNET ?? "10.238.7");
const cluster = new TestCluster();
let gateway = "";
let nodeA: TestServer;
let nodeB: TestServer;

before(async () => {
  await cluster.start({ hosts });
  nodeA = await cluster.startNode(
    "node-a",
    { AENV_NET_PREFIX: "pa", AENV_SLOT_CIDR: "10.231.0.0/16", AENV_MAX_SANDBOXES: "4" },
    { host: true },
  );
  gateway = await cluster.startGateway({ host: "gw" });
});

after(() => cluster.close());

async function gw(method: string, path: string) {
  const r = await fetch(`${gateway}${path}`, { method, headers: { "x-api-key": API_KEY } });
  const text = await r.text();
  return { status: r.status, body: text ? (JSON.parse(text) as { code?: number; message?: string }) : undefined };
}

async function untilCommitted(id: string): Promise<void> {
  const file = join(cluster.repo, "manifests", `sbx-${id}.json`);
  for (let i = 0; i < 300 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(existsSync(file), `pause of ${id} committed to the repository`);
}

async function until(what: string, cond: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test("a node cut off: its paused sandbox resumes elsewhere once, its running one is unreachable; after the heal it reconciles", async (t) => {
  const redis = new Redis(cluster.redisUrl, { maxRetriesPerRequest: 5 });
  try {
    // On A (the only node yet): one running, two paused (one will move, one will not).
    const running = await Sandbox.create(via(gateway));
    await running.commands.run("echo running > /home/user/r.txt");
    const moved = await Sandbox.create(via(gateway));
    await moved.commands.run("echo moved > /home/user/m.txt");
    await moved.commands.run("sleep 100000", { background: true });
    const pid = (await moved.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
    const kept = await Sandbox.create(via(gateway));
    await moved.pause();
    await kept.pause();
    await untilCommitted(moved.sandboxId);
    await untilCommitted(kept.sandboxId);
    for (const s of [running, moved, kept]) assert.equal(await cluster.ownerOf(s.sandboxId), "node-a");

    nodeB = await cluster.startNode(
      "node-b",
      { AENV_NET_PREFIX: "pb", AENV_SLOT_CIDR: "10.232.0.0/16", AENV_MAX_SANDBOXES: "4" },
      { host: true },
    );

    hosts.cut("node-a", ["redis", "gw"]);
    const cutAt = Date.now();
    await until("node A's heartbeat to expire", async () => (await redis.exists("aenv:node:node-a")) === 0, 20_000);
    t.diagnostic(`node A counted dead ${Date.now() - cutAt} ms after the cut`);

    // Fencing: A (still reachable by this test, not by the cluster) resumes nothing.
    const fenced = await nodeA.api("POST", `/sandboxes/${kept.sandboxId}/connect`, { timeout: 60 });
    assert.equal(fenced.status, 503, JSON.stringify(fenced.body));
    assert.match((fenced.body as { message: string }).message, /lease has lapsed/);

    // The running sandbox is reported unreachable, not as if killed.
    const info = await gw("GET", `/sandboxes/${running.sandboxId}`);
    assert.equal(info.status, 503);
    assert.equal(info.body?.code, 503);
    assert.match(info.body?.message ?? "", /node 'node-a', which is unreachable/);
    const conn = await fetch(`${gateway}/sandboxes/${running.sandboxId}/connect`, {
      method: "POST",
      headers: { "x-api-key": API_KEY, "content-type": "application/json" },
      body: JSON.stringify({ timeout: 60 }),
    });
    const connBody = (await conn.json()) as { code: number; message: string };
    assert.equal(conn.status, 503, JSON.stringify(connBody));
    assert.match(connBody.message, /unreachable.*not paused/);

    // The paused one resumes on B, memory and files intact.
    const back = await Sandbox.connect(moved.sandboxId, via(gateway));
    assert.equal(await cluster.ownerOf(moved.sandboxId), "node-b");
    assert.equal((await back.commands.run("cat /home/user/m.txt")).stdout, "moved\n");
    assert.equal((await back.commands.run("pgrep -f 'sleep 100000'")).stdout.trim(), pid, "the same process");
    const claims = cluster.claimsOf(moved.sandboxId);
    assert.equal(claims.length, 1, "one pause, one claim");
    // A still holds its stale copy while cut off.
    assert.equal((await nodeA.api("GET", `/sandboxes/${moved.sandboxId}`)).status, 200);

    hosts.heal("node-a");
    // A's first beat after the heal: it learns B took the sandbox and drops its copy.
    await until("node A to drop its copy", async () => {
      return (await nodeA.api("GET", `/sandboxes/${moved.sandboxId}`)).status === 404;
    });
    assert.match(nodeA.logs(), /lease renewed after it lapsed/);
    assert.match(nodeA.logs(), /paused sandbox superseded/);
    assert.equal(await cluster.ownerOf(moved.sandboxId), "node-b", "never taken back");

    // A's running sandbox is served again through the gateway, its paused one still A's.
    await until(
      "the running sandbox to be served again",
      async () => (await gw("GET", `/sandboxes/${running.sandboxId}`)).status === 200,
    );
    const again = await Sandbox.connect(running.sandboxId, via(gateway));
    assert.equal((await again.commands.run("cat /home/user/r.txt")).stdout, "running\n");
    assert.equal(await cluster.ownerOf(kept.sandboxId), "node-a");
    assert.ok(
      existsSync(join(cluster.repo, "manifests", `sbx-${kept.sandboxId}.json`)),
      "the unmoved pause image is kept",
    );
    assert.equal(cluster.claimsOf(kept.sandboxId).length, 0, "nobody claimed the unmoved pause");

    // No sandbox served by two nodes: the merged list has each once, each route names one node
    // and only that node holds it.
    const listed = (await (
      await fetch(`${gateway}/v2/sandboxes`, { headers: { "x-api-key": API_KEY } })
    ).json()) as Array<{ sandboxID: string }>;
    const ids = listed.map((x) => x.sandboxID).sort();
    assert.deepEqual(ids, [...new Set(ids)], "no duplicates in the list");
    assert.deepEqual(ids, [running.sandboxId, moved.sandboxId, kept.sandboxId].sort());
    for (const id of ids) {
      const owner = await cluster.ownerOf(id);
      const onA = (await nodeA.api("GET", `/sandboxes/${id}`)).status === 200;
      const onB = (await nodeB.api("GET", `/sandboxes/${id}`)).status === 200;
      assert.equal(Number(onA) + Number(onB), 1, `${id} held by exactly one node`);
      assert.equal(owner, onA ? "node-a" : "node-b", `${id} routed to the node that holds it`);
    }
    // And the kept one still resumes (on A, whose lease is current again).
    const k = await Sandbox.connect(kept.sandboxId, via(gateway));
    assert.equal((await k.commands.run("echo ok")).stdout, "ok\n");
    await Promise.all([running, moved, kept].map((s) => Sandbox.kill(s.sandboxId, via(gateway))));
  } finally {
    redis.disconnect();
  }
});
