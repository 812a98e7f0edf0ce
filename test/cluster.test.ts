// A cluster, all real: redis-server, aenv-server nodes (own data dirs and slot ranges, one
// shared posix_fs repository), two aenv-gateway processes, and the unmodified e2b SDK talking
// only to the gateways. Spread, routing through either gateway, merged lists, resume of a
// paused sandbox after its node is killed -9 (and that node restarted), auto-resume by traffic
// on another node, forks that spill over, snapshot starts placed where the snapshot is, drain
// on SIGTERM, two gateways racing to resume, Redis restarted, hostile input, and capacity held
// under 200 concurrent creates.
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
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
const startNode = (id: string, env: Record<string, string> = {}, opts: { emptyTemplates?: boolean } = {}) =>
  cluster.startNode(id, env, opts);
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

/** Nodes commit the templates they join with in the background: waits for base's tree. */
async function untilTemplateCommitted(): Promise<void> {
  const dir = join(cluster.repo, "manifests");
  const has = () => existsSync(dir) && readdirSync(dir).some((f) => /^tpl-.*-r\d+\.json$/.test(f));
  for (let i = 0; i < 1200 && !has(); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(has(), "a node committed its templates to the repository");
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
        // A signed URL names no sandbox: the gateway finds the node whose sandbox signed it.
        assert.equal(await (await fetch(await c.downloadUrl("/tmp/x.txt"))).text(), s.sandboxId);
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
    // The killed node comes back with its old copy of the pause: the repository's claim says
    // another node resumed it, so it drops the copy and never takes the route back.
    const again = await (nodes.get(home) as TestServer).restart();
    nodes.set(home, again);
    assert.match(again.logs(), /resumed on another node; local copy dropped/);
    await cluster.nextHeartbeat(home); // it had the chance to take the route back
    assert.equal(await ownerOf(s.sandboxId), other);
    assert.equal((await again.api("GET", `/sandboxes/${s.sandboxId}`)).status, 404, "not held by the old node");
    const listed = (await gw(g1(), "GET", "/v2/sandboxes")).body as Array<{ sandboxID: string }>;
    assert.equal(listed.filter((x) => x.sandboxID === s.sandboxId).length, 1, "listed once");
    assert.equal((await back.commands.run("echo still")).stdout, "still\n");
    await back.kill();
  });

  test("traffic to an autoResume sandbox whose node died resumes it on another node; without autoResume, 410; a private one only with its traffic token", async () => {
    // All made on node-a directly (its heartbeat publishes their routes), so one crash takes them.
    const direct = via((nodes.get("node-a") as TestServer).url);
    const lifecycle = { onTimeout: "pause", autoResume: true };
    const on = await Sandbox.create({ ...direct, lifecycle } as never);
    const off = await Sandbox.create(direct);
    const priv = await Sandbox.create({ ...direct, lifecycle, network: { allowPublicTraffic: false } } as never);
    const trafficToken = (priv as unknown as { trafficAccessToken?: string }).trafficAccessToken;
    assert.ok(trafficToken, "a private sandbox has a traffic token");
    await on.commands.run("echo auto > /home/user/a.txt");
    await on.pause();
    await off.pause();
    await priv.pause();
    await untilCommitted(on.sandboxId);
    await untilCommitted(off.sandboxId);
    await untilCommitted(priv.sandboxId);
    for (let i = 0; i < 50 && (await ownerOf(off.sandboxId)) !== "node-a"; i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.equal(await ownerOf(on.sandboxId), "node-a");
    await (nodes.get("node-a") as TestServer).crash();
    // Plain traffic to envd through a gateway, no API call: resumed on node-b first.
    const r = await fetch(`${g2()}/proxy/${on.sandboxId}/49983/health`);
    assert.ok(r.status < 300, `envd answered ${r.status}: ${await r.text()}`);
    assert.equal(await ownerOf(on.sandboxId), "node-b");
    const c = await Sandbox.connect(on.sandboxId, via(g1()));
    assert.equal((await c.commands.run("cat /home/user/a.txt")).stdout, "auto\n");
    const r2 = await fetch(`${g1()}/proxy/${off.sandboxId}/49983/health`);
    assert.equal(r2.status, 410, "without autoResume traffic does not resume it");
    assert.match(await r2.text(), /paused/);
    const back = await Sandbox.connect(off.sandboxId, via(g2()));
    assert.equal((await back.commands.run("echo up")).stdout, "up\n");
    // Unauthenticated traffic to a private sandbox's port is refused before anything moves it.
    const denied = await fetch(`${g1()}/proxy/${priv.sandboxId}/8000/`);
    assert.equal(denied.status, 403, `without its traffic token: ${await denied.text()}`);
    const wrong = await fetch(`${g1()}/proxy/${priv.sandboxId}/8000/`, {
      headers: { "e2b-traffic-access-token": "not-the-token" },
    });
    assert.equal(wrong.status, 403);
    assert.notEqual(await ownerOf(priv.sandboxId), "node-b", "refused traffic did not move the sandbox");
    // With it, the sandbox resumes elsewhere (nothing listens on the port: 502 from its node).
    const allowed = await fetch(`${g2()}/proxy/${priv.sandboxId}/8000/`, {
      headers: { "e2b-traffic-access-token": trafficToken as string },
    });
    assert.notEqual(allowed.status, 403, await allowed.text());
    assert.equal(await ownerOf(priv.sandboxId), "node-b");
    nodes.set("node-a", await (nodes.get("node-a") as TestServer).restart());
    await Promise.all([c.kill(), back.kill(), Sandbox.kill(priv.sandboxId, via(g1()))]);
  });

  test("a node that joins with no templates resumes a paused sandbox: the template tree comes from the repository", async () => {
    // Made on node-a directly; node-a committed its templates to the repository when it joined.
    const direct = via((nodes.get("node-a") as TestServer).url);
    const s = await Sandbox.create(direct);
    try {
      await s.commands.run("echo from-a > /home/user/f.txt");
      await s.commands.run("sleep 100000", { background: true });
      const pid = (await s.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
      await s.pause();
      await untilCommitted(s.sandboxId);
      await untilTemplateCommitted();
      const empty = await startNode("node-c", { AENV_MAX_SANDBOXES: "2" }, { emptyTemplates: true });
      try {
        const back = await Sandbox.connect(s.sandboxId, via(empty.url));
        assert.equal((await back.commands.run("cat /home/user/f.txt")).stdout, "from-a\n");
        assert.equal((await back.commands.run("pgrep -f 'sleep 100000'")).stdout.trim(), pid, "the same process");
        assert.match(empty.logs(), /template tree fetched from the repository/);
        await back.kill();
      } finally {
        await empty.stop();
      }
    } finally {
      await Sandbox.kill(s.sandboxId, via(g1())).catch(() => {});
    }
  });

  test("a fork larger than its node: the rest start on another node from the same capture", async (t) => {
    const direct = via((nodes.get("node-a") as TestServer).url);
    const p = await Sandbox.create(direct);
    for (let i = 0; i < 50 && (await ownerOf(p.sandboxId)) !== "node-a"; i++)
      await new Promise((r) => setTimeout(r, 100));
    await p.commands.run("echo parent > /home/user/p.txt");
    await p.commands.run("sleep 100000", { background: true });
    const pid = (await p.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
    // node-a admits 4: the parent and 3 children; 2 more go to node-b.
    const r = await gw(g1(), "POST", `/sandboxes/${p.sandboxId}/fork`, { count: 5, timeout: 120 });
    const all = [
      p.sandboxId,
      ...((r.body as Array<{ sandbox?: { sandboxID: string } }>) ?? []).flatMap((k) =>
        k.sandbox ? [k.sandbox.sandboxID] : [],
      ),
    ];
    t.after(() => Promise.all(all.map((id) => gw(g2(), "DELETE", `/sandboxes/${id}`))));
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const kids = r.body as Array<{ sandbox?: { sandboxID: string }; error?: unknown }>;
    assert.equal(kids.length, 5);
    assert.ok(
      kids.every((k) => k.sandbox),
      `every child started: ${JSON.stringify(kids.map((k) => k.error ?? "ok"))}`,
    );
    const ids = kids.map((k) => k.sandbox?.sandboxID as string);
    const owners = await Promise.all(ids.map(ownerOf));
    assert.equal(owners.filter((o) => o === "node-a").length, 3, owners.join(","));
    assert.equal(owners.filter((o) => o === "node-b").length, 2, owners.join(","));
    for (const id of ids) {
      const c = await Sandbox.connect(id, via(g2()));
      assert.equal((await c.commands.run("cat /home/user/p.txt")).stdout, "parent\n");
      assert.equal((await c.commands.run("pgrep -f 'sleep 100000'")).stdout.trim(), pid, "the parent's process");
    }
    // The capture published for the spill is gone once the children run.
    for (let i = 0; i < 50; i++) {
      const snaps = (await gw(g1(), "GET", `/snapshots?sandboxID=${p.sandboxId}`)).body as unknown[];
      if (!snaps.length) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    assert.deepEqual((await gw(g1(), "GET", `/snapshots?sandboxID=${p.sandboxId}`)).body, [], gateways[0]?.logs());
  });

  test("a start from a snapshot goes to the node that took it", async () => {
    const src = await Sandbox.create(via(g1()));
    await src.files.write("/home/user/s.txt", "snapped");
    const home = await ownerOf(src.sandboxId);
    const snap = (await gw(g2(), "POST", `/sandboxes/${src.sandboxId}/snapshots`, { name: "cluster-snap" })).body as {
      snapshotID: string;
    };
    // A node with room is preferred; a holder that looks full (kills are published within a
    // beat, creates answered since its last beat are counted) rightly goes elsewhere. So each
    // start waits until the holder runs only the source, and its sandbox is removed after.
    const room = async () =>
      ((await gw(g1(), "GET", `/nodes/${home}`)).body as { sandboxCount: number }).sandboxCount <= 1;
    for (const ref of [snap.snapshotID, "cluster-snap", snap.snapshotID]) {
      for (let i = 0; i < 50 && !(await room()); i++) await new Promise((r) => setTimeout(r, 100));
      const c = await Sandbox.create(ref, via(g1()));
      try {
        const on = await ownerOf(c.sandboxId);
        if (on !== home) {
          assert.fail(
            `a start from ${ref} placed on ${on}, not ${home}: ${JSON.stringify((await gw(g1(), "GET", "/nodes")).body)}`,
          );
        }
        assert.equal(await c.files.read("/home/user/s.txt"), "snapped");
      } finally {
        await gw(g2(), "DELETE", `/sandboxes/${c.sandboxId}`);
      }
    }
    await gw(g2(), "DELETE", `/sandboxes/${src.sandboxId}`);
    assert.equal((await gw(g1(), "DELETE", `/templates/${snap.snapshotID}`)).status, 204);
  });

  test("SIGTERM drains a node: its sandboxes are paused into the repository and resume elsewhere", async () => {
    await startNode("node-c", { AENV_MAX_SANDBOXES: "4" });
    // Made on node-c directly (its heartbeat publishes the route), then drained from there.
    const s = await Sandbox.create(via((nodes.get("node-c") as TestServer).url));
    for (let i = 0; i < 50 && (await ownerOf(s.sandboxId)) !== "node-c"; i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.equal(await ownerOf(s.sandboxId), "node-c");
    await s.commands.run("echo drained > /home/user/d.txt; sleep 100000 >/dev/null 2>&1 &");
    const node = nodes.get("node-c") as TestServer;
    await node.stop(); // SIGTERM: drain
    assert.match(node.logs(), /drained/);
    const nodesNow = (await gw(g1(), "GET", "/nodes")).body as Array<{ nodeID: string }>;
    assert.ok(!nodesNow.some((n) => n.nodeID === "node-c"), "a drained node leaves the cluster");
    const back = await Sandbox.connect(s.sandboxId, via(g1()));
    const owner = await ownerOf(s.sandboxId);
    assert.ok(owner !== "node-c" && alive(nodes.get(owner) as TestServer), `resumed on ${owner}`);
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
      // Signed file URLs nobody signed: refused, a malformed one without asking the nodes.
      assert.equal(await raw("/files?path=/etc/passwd&signature=v1_bogus", {}), 401);
      assert.equal(await raw(`/files?path=/etc/passwd&signature=v1_${"A".repeat(43)}`, {}), 401);
      assert.equal(await raw(`/files?path=/x&signature=v1_${"A".repeat(43)}`, {}, "POST", "x"), 401);
      assert.equal((await fetch(`${g}/health`)).status, 204);
      assert.equal((await s.commands.run("echo fine")).stdout, "fine\n");
    } finally {
      await s.kill();
    }
  });

  test("200 concurrent creates never put a node over its capacity; freed room is usable at once", async () => {
    const live = [...nodes.values()].filter(alive).length;
    assert.ok(live >= 1);
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, (_, i) =>
        gw(i % 2 ? g1() : g2(), "POST", "/v2/sandboxes", { templateID: "base", timeout: 120 }),
      ),
    );
    const created = results
      .filter((r) => r.status === "fulfilled" && r.value.status === 201)
      .map((r) => ((r as PromiseFulfilledResult<{ body: unknown }>).value.body as { sandboxID: string }).sandboxID);
    const refused = results.filter((r) => r.status === "fulfilled" && r.value.status === 503).length;
    assert.equal(
      created.length + refused,
      200,
      JSON.stringify(results.map((r) => r.status === "fulfilled" && r.value.status)),
    );
    assert.ok(created.length >= 1 && created.length <= live * 4, `${created.length} created on ${live} nodes of 4`);
    const perNode = new Map<string, number>();
    for (const id of created) perNode.set(await ownerOf(id), (perNode.get(await ownerOf(id)) ?? 0) + 1);
    for (const [n, c] of perNode) assert.ok(c <= 4, `${n} holds ${c}`);
    await Promise.all(created.map((id) => gw(g2(), "DELETE", `/sandboxes/${id}`)));
    // Room freed by the kills is published within a moment (not after the next heartbeats).
    const t0 = Date.now();
    let again = await gw(g1(), "POST", "/v2/sandboxes", { templateID: "base", timeout: 60 });
    while (again.status === 503 && Date.now() - t0 < 600) {
      await new Promise((r) => setTimeout(r, 50));
      again = await gw(g1(), "POST", "/v2/sandboxes", { templateID: "base", timeout: 60 });
    }
    assert.equal(again.status, 201, `a create ${Date.now() - t0} ms after the kills: ${JSON.stringify(again.body)}`);
    await gw(g1(), "DELETE", `/sandboxes/${(again.body as { sandboxID: string }).sandboxID}`);
  });

  test("the gateways logged no bug", () => {
    for (const g of gateways) assert.doesNotMatch(g.logs(), /BUG: un/);
  });
});
