// A cluster, all real: redis-server, aenv-server nodes (own data dirs and slot ranges, one
// shared posix_fs repository), two aenv-gateway processes, and the unmodified e2b SDK talking
// only to the gateways. Spread, routing through either gateway, merged lists, resume of a
// paused sandbox after its node is killed -9, drain on SIGTERM, two gateways racing to resume,
// and capacity held under a burst.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { API_KEY, alive, TestCluster, via } from "./helpers/cluster.js";
import { untilTrue } from "./helpers/sandbox.js";
import type { TestServer } from "./helpers/server.js";

const cluster = new TestCluster();
const nodes = cluster.nodes;
const gateways = cluster.gateways;
const startNode = (id: string, env: Record<string, string> = {}) => cluster.startNode(id, env);
const ownerOf = (id: string) => cluster.ownerOf(id);

async function gw(url: string, method: string, path: string, body?: unknown) {
  const r = await fetch(`${url}${path}`, {
    method,
    headers: { "x-api-key": API_KEY, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, body: text ? (JSON.parse(text) as unknown) : undefined };
}

async function untilCommitted(id: string): Promise<void> {
  const file = join(cluster.repo, "manifests", `sbx-${id}.json`);
  for (let i = 0; i < 300 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(existsSync(file), `pause of ${id} committed to the repository`);
}

before(async () => {
  await cluster.start();
  await startNode("node-a", { AENV_MAX_SANDBOXES: "4" });
  await startNode("node-b", { AENV_MAX_SANDBOXES: "4" });
  await cluster.startGateway();
  await cluster.startGateway();
});

after(() => cluster.close());

describe("a cluster of nodes behind two gateways", () => {
  const [g1, g2] = [() => gateways[0]?.url as string, () => gateways[1]?.url as string];

  test("GET /nodes lists both nodes, ready", async () => {
    const r = await gw(g1(), "GET", "/nodes");
    assert.equal(r.status, 200);
    const list = r.body as Array<{ nodeID: string; status: string; capacity: number }>;
    assert.deepEqual(
      list.map((n) => [n.nodeID, n.status]),
      [
        ["node-a", "ready"],
        ["node-b", "ready"],
      ],
    );
    assert.equal((await gw(g2(), "GET", "/nodes/node-b")).status, 200);
    assert.equal((await gw(g2(), "GET", "/nodes/nope")).status, 404);
    assert.equal((await fetch(`${g1()}/nodes`)).status, 401, "the gateway checks the API key");
  });

  test("creates spread over nodes; every call works through either gateway; lists merge", async () => {
    const made = await Promise.all(
      [0, 1, 2, 3].map(() => Sandbox.create({ ...via(g1()), metadata: { run: "spread" } })),
    );
    try {
      const owners = await Promise.all(made.map((s) => ownerOf(s.sandboxId)));
      assert.ok(
        owners.every((o) => o === "node-a" || o === "node-b"),
        `owners: ${owners.join(",")}`,
      );
      for (const s of made) {
        // Through the other gateway: commands (Connect streams) and files.
        const c = await Sandbox.connect(s.sandboxId, via(g2()));
        assert.equal((await c.commands.run("echo hi-$((6*7))")).stdout, "hi-42\n");
        await c.files.write("/tmp/x.txt", s.sandboxId);
        assert.equal(await c.files.read("/tmp/x.txt"), s.sandboxId);
      }
      const page1 = await gw(g2(), "GET", "/v2/sandboxes?metadata=run%3Dspread&limit=3");
      assert.equal((page1.body as unknown[]).length, 3);
      const next = page1.headers.get("x-next-token");
      assert.ok(next, "a second page");
      const page2 = await gw(g2(), "GET", `/v2/sandboxes?metadata=run%3Dspread&limit=3&nextToken=${next}`);
      const ids = [
        ...(page1.body as Array<{ sandboxID: string }>),
        ...(page2.body as Array<{ sandboxID: string }>),
      ].map((x) => x.sandboxID);
      assert.deepEqual(ids.sort(), made.map((s) => s.sandboxId).sort());
      const listed = await Sandbox.list({ ...via(g1()), query: { metadata: { run: "spread" } } }).nextItems();
      assert.equal(listed.length, 4);
    } finally {
      await Promise.all(made.map((s) => Sandbox.kill(s.sandboxId, via(g2()))));
    }
    assert.equal(((await gw(g1(), "GET", "/v2/sandboxes?metadata=run%3Dspread")).body as unknown[]).length, 0);
  });

  test("a paused sandbox resumes on another node after its node is killed -9, memory and files intact", async () => {
    const s = await Sandbox.create(via(g1()));
    await s.commands.run("echo kept > /home/user/f.txt");
    await s.commands.run("sleep 100000", { background: true });
    const pid = (await s.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
    assert.ok(pid);
    await s.pause();
    await untilCommitted(s.sandboxId);
    const home = await ownerOf(s.sandboxId);
    await (nodes.get(home) as TestServer).crash();
    const other = home === "node-a" ? "node-b" : "node-a";
    const back = await Sandbox.connect(s.sandboxId, via(g2()));
    assert.equal(await ownerOf(s.sandboxId), other);
    assert.equal((await back.commands.run("cat /home/user/f.txt")).stdout, "kept\n");
    assert.equal((await back.commands.run(`pgrep -f 'sleep 100000'`)).stdout.trim(), pid, "the same process");
    await back.kill();
  });

  test("SIGTERM drains a node: its sandboxes are paused into the repository and resume elsewhere", async () => {
    await startNode("node-c", { AENV_MAX_SANDBOXES: "4" });
    const survivor = [...nodes.entries()].find(([id, n]) => id !== "node-c" && alive(n))?.[0];
    assert.ok(survivor);
    // Fill placement toward node-c by creating until one lands there.
    let s: Sandbox | undefined;
    const extra: Sandbox[] = [];
    for (let i = 0; i < 6 && !s; i++) {
      const c = await Sandbox.create(via(g1()));
      if ((await ownerOf(c.sandboxId)) === "node-c") s = c;
      else extra.push(c);
    }
    await Promise.all(extra.map((x) => x.kill()));
    assert.ok(s, "a sandbox placed on node-c");
    await s.commands.run("echo drained > /home/user/d.txt; sleep 100000 >/dev/null 2>&1 &");
    const node = nodes.get("node-c") as TestServer;
    await node.stop(); // SIGTERM: drain
    assert.match(node.logs(), /drained/);
    const nodesNow = (await gw(g1(), "GET", "/nodes")).body as Array<{ nodeID: string }>;
    assert.ok(!nodesNow.some((n) => n.nodeID === "node-c"), "a drained node leaves the cluster");
    const back = await Sandbox.connect(s.sandboxId, via(g1()));
    assert.equal(await ownerOf(s.sandboxId), survivor);
    assert.equal((await back.commands.run("cat /home/user/d.txt")).stdout, "drained\n");
    await untilTrue(back, "pgrep -f 'sleep 100000' >/dev/null", 10);
    await back.kill();
  });

  test("two gateways racing to move a sandbox off a dead node resume it once", async () => {
    await startNode("node-d", { AENV_MAX_SANDBOXES: "4" });
    const s = await Sandbox.create(via(g1()));
    await s.commands.run("echo once > /home/user/o.txt");
    await s.pause();
    await untilCommitted(s.sandboxId);
    const home = await ownerOf(s.sandboxId);
    await (nodes.get(home) as TestServer).crash();
    const [a, b] = await Promise.all([
      gw(g1(), "POST", `/sandboxes/${s.sandboxId}/connect`, { timeout: 60 }),
      gw(g2(), "POST", `/sandboxes/${s.sandboxId}/connect`, { timeout: 60 }),
    ]);
    assert.deepEqual([a.status, b.status].sort(), [200, 201], "one moved and resumed it, the other found it running");
    const owner = await ownerOf(s.sandboxId);
    assert.notEqual(owner, home);
    const listed = (await gw(g2(), "GET", "/v2/sandboxes")).body as Array<{ sandboxID: string }>;
    assert.equal(listed.filter((x) => x.sandboxID === s.sandboxId).length, 1);
    const c = await Sandbox.connect(s.sandboxId, via(g2()));
    assert.equal((await c.commands.run("cat /home/user/o.txt")).stdout, "once\n");
    await c.kill();
  });

  test("Redis restarted mid-run: nodes republish themselves and their sandboxes", async () => {
    const s = await Sandbox.create(via(g1()));
    await cluster.restartRedis();
    let nodesBack = 0;
    for (let i = 0; i < 100 && nodesBack === 0; i++) {
      const r = await gw(g2(), "GET", "/nodes").catch(() => undefined);
      nodesBack = r?.status === 200 ? (r.body as unknown[]).length : 0;
      if (!nodesBack) await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok(nodesBack > 0, "nodes registered again");
    for (let i = 0; i < 50 && !(await ownerOf(s.sandboxId)); i++) await new Promise((res) => setTimeout(res, 100));
    const c = await Sandbox.connect(s.sandboxId, via(g2()));
    assert.equal((await c.commands.run("echo back")).stdout, "back\n");
    await c.kill();
  });

  test("hostile input through a gateway: 4xx with the E2B body, the gateway keeps serving", async () => {
    const g = g1();
    const s = await Sandbox.create(via(g));
    try {
      const id = s.sandboxId;
      const raw = async (path: string, headers: Record<string, string>, method = "GET", body?: string) => {
        const r = await fetch(`${g}${path}`, { method, headers, body });
        const b = (await r.json()) as { code: number; message: string };
        assert.equal(b.code, r.status, `${method} ${path.slice(0, 60)}`);
        assert.equal(typeof b.message, "string");
        return r.status;
      };
      // Bad ports in all three routing forms, without a key: a 400, as on a node.
      for (const port of ["65536", "0", "abc"]) {
        assert.equal(await raw(`/proxy/${id}/${port}/`, {}), 400);
        assert.equal(await raw("/", { "e2b-sandbox-id": id, "e2b-sandbox-port": port }), 400);
      }
      // fetch() will not send another Host: a plain request does.
      const hostStatus = await new Promise<number>((resolve, reject) => {
        const u = new URL(g);
        const r = request(
          { host: u.hostname, port: u.port, path: "/", headers: { host: `70000-${id}.sbx.localhost` } },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        r.on("error", reject);
        r.end();
      });
      assert.equal(hostStatus, 400);
      // No key, malformed bodies, odd IDs.
      assert.equal(await raw(`/sandboxes/${id}`, {}), 401);
      const key = { "x-api-key": API_KEY, "content-type": "application/json" };
      assert.equal(await raw("/v2/sandboxes", key, "POST", '{"templateID": "base",'), 400);
      assert.equal(await raw("/v2/sandboxes", key, "POST", '{"templateID": 42}'), 400);
      assert.equal(await raw(`/sandboxes/${"i".repeat(5000)}`, key), 404);
      assert.equal(await raw("/sandboxes/..%2F..", key), 404);
      assert.equal(await raw("/sandboxes/%zz/pause", key, "POST", "{}"), 400);
      assert.equal((await fetch(`${g}/health`)).status, 204);
      assert.equal((await s.commands.run("echo fine")).stdout, "fine\n");
    } finally {
      await s.kill();
    }
  });

  test("a burst of creates never puts a node over its capacity", async () => {
    const live = [...nodes.values()].filter(alive).length;
    assert.ok(live >= 1);
    const results = await Promise.allSettled(
      Array.from({ length: 14 }, () => gw(g1(), "POST", "/v2/sandboxes", { templateID: "base", timeout: 120 })),
    );
    const created = results
      .filter((r) => r.status === "fulfilled" && r.value.status === 201)
      .map((r) => ((r as PromiseFulfilledResult<{ body: unknown }>).value.body as { sandboxID: string }).sandboxID);
    const refused = results.filter((r) => r.status === "fulfilled" && r.value.status === 429).length;
    assert.equal(
      created.length + refused,
      14,
      JSON.stringify(results.map((r) => r.status === "fulfilled" && r.value.status)),
    );
    assert.ok(created.length >= 1 && created.length <= live * 4, `${created.length} created on ${live} nodes of 4`);
    const perNode = new Map<string, number>();
    for (const id of created) perNode.set(await ownerOf(id), (perNode.get(await ownerOf(id)) ?? 0) + 1);
    for (const [n, c] of perNode) assert.ok(c <= 4, `${n} holds ${c}`);
    await Promise.all(created.map((id) => gw(g2(), "DELETE", `/sandboxes/${id}`)));
  });

  test("the gateways logged no bug", () => {
    for (const g of gateways) assert.doesNotMatch(g.logs(), /BUG: un/);
  });
});
