// A node on the simulated runtime (runtime.driver = sim) behind a real gateway and Redis, driven
// by the unmodified e2b SDK: create, commands.run, list, pause and connect, kill. What is
// simulated is the sandbox alone (a record and an envd stand-in on a loopback address); the
// node, the gateway and the repository are the real ones, so this is what bench/cluster-scale.ts
// runs fifty of.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";
import { gatewayProof } from "@aenv/edge/gateway-proof";
import { GATEWAY_PROOF_HEADER } from "@aenv/protocol";
import { CommandExitError, Sandbox } from "e2b";
import { Redis } from "ioredis";
import { S3_CREDENTIALS, startS3 } from "../packages/server/test/helpers/s3.js";
import { API_KEY, TestCluster, via } from "./helpers/cluster.js";
import { Relay } from "./helpers/relay.js";
import { sdkOptions } from "./helpers/server.js";

/** The loopback range follows this run's slot range (10.X.0.0/16 → 127.X.0.0/16). */
const octet = Number(/^\d+\.(\d+)\./.exec(process.env.AENV_TEST_SLOT_CIDR ?? "")?.[1] ?? 202);
const cluster = new TestCluster(process.env.AENV_TEST_NET_PREFIX ?? "aet");
let gw = "";
let node = "";

before(async () => {
  await cluster.start();
  // info: a sandbox's logs (its lifecycle lines) are what the node logs about it at info.
  // Webhook receivers in these tests listen on loopback.
  const n = await cluster.startNode(
    "sim-a",
    { AENV_LOG_LEVEL: "info", AENV_ALLOW_PRIVATE_WEBHOOKS: "1" },
    { sim: { slotOctet: octet } },
  );
  node = n.url;
  gw = await cluster.startGateway();
});

after(() => cluster.close());

async function gwCall(method: string, path: string, body?: unknown) {
  const r = await fetch(`${gw}${path}`, {
    method,
    headers: { "x-api-key": API_KEY, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  return { status: r.status, body: text ? (JSON.parse(text) as unknown) : undefined };
}

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
    // The v1 list, every node's merged by the gateway.
    const v1 = await gwCall("GET", "/sandboxes");
    assert.equal(v1.status, 200);
    assert.ok(
      (v1.body as Array<{ sandboxID: string }>).some((i) => i.sandboxID === s.sandboxId),
      "in the v1 list",
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

  test("batch metrics and X-Total-Running through the gateway", async () => {
    const s = await Sandbox.create(via(gw));
    try {
      const unknown = `i${"0".repeat(20)}`;
      const m = await gwCall("GET", `/sandboxes/metrics?sandbox_ids=${s.sandboxId},${unknown}`);
      assert.equal(m.status, 200, JSON.stringify(m.body));
      const got = (m.body as { sandboxes: Record<string, { memTotal: number }> }).sandboxes;
      assert.deepEqual(Object.keys(got), [s.sandboxId]);
      assert.ok((got[s.sandboxId]?.memTotal ?? 0) > 0);
      assert.equal((await gwCall("GET", "/sandboxes/metrics?sandbox_ids=")).status, 400);
      const list = await fetch(`${gw}/v2/sandboxes?limit=1`, { headers: { "x-api-key": API_KEY } });
      assert.equal(list.status, 200);
      assert.ok(Number(list.headers.get("x-total-running")) >= 1, String(list.headers.get("x-total-running")));
    } finally {
      await s.kill();
    }
  });

  test("sandbox logs, v1 and v2, reach the owning node through the gateway", async () => {
    const s = await Sandbox.create(via(gw));
    try {
      const v1 = await gwCall("GET", `/sandboxes/${s.sandboxId}/logs`);
      assert.equal(v1.status, 200, JSON.stringify(v1.body));
      const b1 = v1.body as { logs: Array<{ line: string }>; logEntries: Array<{ message: string }> };
      assert.ok(b1.logs.length > 0 && b1.logEntries.length === b1.logs.length, JSON.stringify(b1));
      const v2 = await gwCall("GET", `/v2/sandboxes/${s.sandboxId}/logs?limit=1&direction=backward`);
      assert.equal(v2.status, 200, JSON.stringify(v2.body));
      const b2 = v2.body as { logs: Array<{ message: string; level: string; timestamp: string }> };
      assert.equal(b2.logs.length, 1, JSON.stringify(b2));
      assert.ok(!Number.isNaN(Date.parse(b2.logs[0]?.timestamp ?? "")), JSON.stringify(b2));
      assert.equal((await gwCall("GET", "/v2/sandboxes/nosuchsandbox/logs")).status, 404);
    } finally {
      await s.kill();
    }
  });

  test("POST /v2/sandboxes/{id}/fork through the gateway: children on the parent's node", async () => {
    const s = await Sandbox.create(via(gw));
    const kids: string[] = [];
    try {
      const r = await gwCall("POST", `/v2/sandboxes/${s.sandboxId}/fork`, { count: 2 });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const children = r.body as Array<{ sandbox?: { sandboxID: string } }>;
      assert.equal(children.length, 2);
      for (const c of children) {
        assert.ok(c.sandbox, JSON.stringify(c));
        kids.push(c.sandbox.sandboxID);
        assert.equal(await cluster.ownerOf(c.sandbox.sandboxID), "sim-a", "its route recorded");
        const child = await Sandbox.connect(c.sandbox.sandboxID, via(gw));
        assert.equal((await child.commands.run("true")).exitCode, 0);
      }
    } finally {
      for (const id of [s.sandboxId, ...kids]) await Sandbox.kill(id, via(gw)).catch(() => {});
    }
  });

  test("the team's metrics through the gateway: the nodes' samples added up", async () => {
    assert.deepEqual((await gwCall("GET", "/teams")).body, [
      { teamID: "default", name: "default", apiKey: API_KEY, isDefault: true },
    ]);
    const s = await Sandbox.create(via(gw));
    try {
      let series: Array<{ concurrentSandboxes: number }> = [];
      for (let i = 0; i < 60 && !series.some((m) => m.concurrentSandboxes >= 1); i++) {
        await new Promise((r) => setTimeout(r, 200));
        series = (await gwCall("GET", "/teams/default/metrics")).body as typeof series;
      }
      assert.ok(
        series.some((m) => m.concurrentSandboxes >= 1),
        JSON.stringify(series),
      );
      const max = await gwCall("GET", "/teams/default/metrics/max?metric=concurrent_sandboxes");
      assert.equal(max.status, 200);
      assert.ok((max.body as { value: number }).value >= 1);
      assert.equal((await gwCall("GET", "/teams/nope/metrics")).status, 404);
    } finally {
      await s.kill();
    }
  });

  test("creates with one idempotency key, at once and retried, make one sandbox; after its kill the key makes a new one", async () => {
    const key = `rollout-${process.pid}-${Date.now()}`;
    const opts = { ...via(gw), metadata: { "aenv.idempotency_key": key } };
    const made = await Promise.all([Sandbox.create(opts), Sandbox.create(opts), Sandbox.create(opts)]);
    const id = made[0]?.sandboxId as string;
    try {
      assert.deepEqual(
        made.map((s) => s.sandboxId),
        [id, id, id],
      );
      // The header form names the same key: a retry of the first create.
      const again = await fetch(`${gw}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": API_KEY, "content-type": "application/json", "idempotency-key": key },
        body: JSON.stringify({ templateID: "base" }),
      });
      assert.equal(again.status, 201);
      assert.equal(((await again.json()) as { sandboxID: string }).sandboxID, id);
      const listed = await Sandbox.list({
        ...via(gw),
        query: { metadata: { "aenv.idempotency_key": key } },
      }).nextItems();
      assert.deepEqual(
        listed.map((i) => i.sandboxId),
        [id],
        "one sandbox holds the key",
      );
      const clash = await fetch(`${gw}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": API_KEY, "content-type": "application/json", "idempotency-key": `${key}-x` },
        body: JSON.stringify({ templateID: "base", metadata: { "aenv.idempotency_key": key } }),
      });
      assert.equal(clash.status, 400, "header and metadata naming two keys");
      await Sandbox.kill(id, via(gw));
      const next = await Sandbox.create(opts);
      assert.notEqual(next.sandboxId, id, "a killed sandbox frees its key");
      await next.kill();
    } finally {
      await Sandbox.kill(id, via(gw)).catch(() => {});
    }
  });

  test("a webhook registered through the gateway is kept in Redis and told the node's lifecycle events", async () => {
    const got: Array<{ type: string; sandboxId: string }> = [];
    const receiver = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        got.push(JSON.parse(body) as { type: string; sandboxId: string });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", r));
    const port = (receiver.address() as { port: number }).port;
    const made = await gwCall("POST", "/events/webhooks", {
      name: "cluster",
      url: `http://127.0.0.1:${port}/hook`,
      events: ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"],
      signatureSecret: "cluster-webhook-secret",
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = (made.body as { id: string }).id;
    try {
      const redis = new Redis(cluster.redisUrl);
      try {
        assert.ok(await redis.hexists("aenv:webhooks", id), "kept in the cluster's Redis");
      } finally {
        redis.disconnect();
      }
      const s = await Sandbox.create(via(gw));
      await s.kill();
      for (let i = 0; i < 200 && got.filter((g) => g.sandboxId === s.sandboxId).length < 2; i++)
        await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(
        got.filter((g) => g.sandboxId === s.sandboxId).map((g) => g.type),
        ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"],
      );
      const d = await gwCall("GET", `/events/webhooks/${id}/deliveries`);
      assert.equal(d.status, 200);
      const rows = (d.body as Array<{ sandboxID: string; status: string }>).filter((r) => r.sandboxID === s.sandboxId);
      assert.deepEqual(
        rows.map((r) => r.status),
        ["delivered", "delivered"],
      );
      assert.equal((await gwCall("GET", "/events/webhooks/nope/deliveries")).status, 404);
    } finally {
      assert.equal((await gwCall("DELETE", `/events/webhooks/${id}`)).status, 200);
      receiver.close();
    }
  });
});

describe("secrets in a cluster", () => {
  test("made through the gateway, kept in Redis with their values sealed, the same on every node", async () => {
    const value = "cluster-s3cr3t-value";
    const made = await gwCall("POST", "/secrets", { name: "cluster-token", value, allowedHosts: ["api.example"] });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = (made.body as { secretID: string }).secretID;
    // A node that joins later (octet + 2: the next describe's node takes + 1).
    const second = await cluster.startNode("sim-sec", {}, { sim: { slotOctet: octet + 2 } });
    try {
      const redis = new Redis(cluster.redisUrl);
      try {
        const raw = await redis.hget("aenv:secrets", id);
        assert.ok(raw, "kept in the cluster's Redis");
        assert.ok(!raw.includes(value) && !raw.includes(Buffer.from(value).toString("base64")), raw);
      } finally {
        redis.disconnect();
      }
      for (const url of [cluster.nodes.get("sim-a")!.url, second.url]) {
        const r = await fetch(`${url}/secrets/${id}`, { headers: { "x-api-key": API_KEY } });
        const body = (await r.json()) as Record<string, unknown>;
        assert.equal(r.status, 200, JSON.stringify(body));
        assert.equal(body.name, "cluster-token");
        assert.ok(!JSON.stringify(body).includes(value), "no answer carries the value");
      }
      const updated = await gwCall("POST", `/secrets/${id}`, { value: "newer-value" });
      assert.equal(updated.status, 200, JSON.stringify(updated.body));
      const there = await second.api("GET", `/secrets/${id}`);
      assert.equal(
        (there.body as { currentVersion: number }).currentVersion,
        2,
        "a change through any node is every node's",
      );
      const list = await gwCall("GET", "/secrets");
      assert.ok((list.body as Array<{ secretID: string }>).some((x) => x.secretID === id));
    } finally {
      assert.equal((await gwCall("DELETE", `/secrets/${id}`)).status, 204);
      assert.equal((await gwCall("GET", `/secrets/${id}`)).status, 404);
      await second.stop();
      cluster.nodes.delete("sim-sec");
    }
  });
});

describe("API keys through the gateway", () => {
  const as = async (key: string, method: string, path: string, body?: unknown, to = gw, extra = {}) => {
    const r = await fetch(`${to}${path}`, {
      method,
      headers: {
        "x-api-key": key,
        ...(body !== undefined ? { "content-type": "application/json" } : {}),
        ...extra,
      },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    return { status: r.status, headers: r.headers, body: text ? (JSON.parse(text) as unknown) : undefined };
  };
  const newKey = async (name: string, limits?: Record<string, number>) => {
    const r = await as(API_KEY, "POST", "/api-keys", { name, ...(limits ? { limits } : {}) });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return (r.body as { key: string }).key;
  };

  test("a key reaches only its own sandboxes, by the gateway's routes and the node's", async () => {
    const a = await newKey("gw-a");
    const b = await newKey("gw-b");
    assert.equal((await as(a, "GET", "/api-keys")).status, 403, "keys are the operator's to manage");
    const s = await Sandbox.create({ ...via(gw), apiKey: a });
    const id = s.sandboxId;
    for (const [m, p] of [
      ["GET", `/sandboxes/${id}`],
      ["POST", `/sandboxes/${id}/connect`],
      ["POST", `/sandboxes/${id}/pause`],
      ["POST", `/v2/sandboxes/${id}/fork`],
      ["GET", `/sandboxes/${id}/logs`],
      ["DELETE", `/sandboxes/${id}`],
    ] as const) {
      const r = await as(b, m, p, m === "POST" ? {} : undefined);
      assert.equal(r.status, 404, `${m} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
    }
    const listed = (await as(b, "GET", "/v2/sandboxes")).body as Array<{ sandboxID: string }>;
    assert.ok(!listed.some((x) => x.sandboxID === id));
    const batch = await as(b, "GET", `/sandboxes/metrics?sandbox_ids=${id}`);
    assert.deepEqual((batch.body as { sandboxes: unknown }).sandboxes, {});
    assert.equal((await as(a, "GET", `/sandboxes/${id}`)).status, 200);
    assert.equal((await as(API_KEY, "GET", `/sandboxes/${id}`)).status, 200, "the operator sees every key's");
    await s.kill();
  });

  test("a node takes a tenant's key only through a gateway: directly, or with a proof of its own making, 403", async () => {
    const d = await newKey("gw-direct", { maxSandboxes: 1 });
    const e = await newKey("gw-other");
    // Through the gateway, whatever proof the client sends (dropped there).
    const made = await as(d, "POST", "/sandboxes", { templateID: "base", timeout: 60 }, gw, {
      [GATEWAY_PROOF_HEADER]: "forged",
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = (made.body as { sandboxID: string }).sandboxID;
    // On the node, past the gateway that counts the key's cap of one.
    const proofOfE = gatewayProof(API_KEY, e); // another key's proof opens nothing for this one
    for (const extra of [{}, { [GATEWAY_PROOF_HEADER]: "forged" }, { [GATEWAY_PROOF_HEADER]: proofOfE }]) {
      for (const [m, p] of [
        ["POST", "/sandboxes"],
        ["GET", "/v2/sandboxes"],
        ["GET", `/sandboxes/${id}`],
        ["DELETE", `/sandboxes/${id}`],
      ] as const) {
        const r = await as(d, m, p, m === "POST" ? { templateID: "base" } : undefined, node, extra);
        assert.equal(r.status, 403, `${m} ${p} ${JSON.stringify(extra)}: ${r.status} ${JSON.stringify(r.body)}`);
        assert.match((r.body as { message: string }).message, /gateway/);
      }
    }
    // The gateway's own proof for the key is what a node takes; the operator's key needs none.
    assert.equal(
      (await as(d, "GET", `/sandboxes/${id}`, undefined, node, { [GATEWAY_PROOF_HEADER]: gatewayProof(API_KEY, d) }))
        .status,
      200,
    );
    assert.equal((await as(API_KEY, "GET", `/sandboxes/${id}`, undefined, node)).status, 200);
    assert.equal((await as(d, "DELETE", `/sandboxes/${id}`)).status, 204);
  });

  test("a key's cap holds across the gateway: the rest get 429 with Retry-After, and a retry gets in once one is gone", async () => {
    const c = await newKey("gw-c", { maxSandboxes: 3 });
    const answers = await Promise.all(
      Array.from({ length: 6 }, () => as(c, "POST", "/sandboxes", { templateID: "base", timeout: 120 })),
    );
    const made = answers.filter((r) => r.status === 201).map((r) => (r.body as { sandboxID: string }).sandboxID);
    const refused = answers.filter((r) => r.status === 429);
    assert.equal(made.length, 3, JSON.stringify(answers.map((r) => r.status)));
    assert.equal(refused.length, 3);
    for (const r of refused) {
      assert.equal((r.body as { error_code: string }).error_code, "api_key_sandbox_limit");
      assert.ok(Number(r.headers.get("retry-after")) >= 1);
    }
    await as(c, "DELETE", `/sandboxes/${made[0]}`);
    // The freed place is seen once the node's heartbeat counts it: a client that honours
    // Retry-After gets in within a few tries.
    let got: { status: number; headers: Headers } | undefined;
    for (let i = 0; i < 10; i++) {
      got = await as(c, "POST", "/sandboxes", { templateID: "base", timeout: 120 });
      if (got.status !== 429) break;
      await new Promise((r) => setTimeout(r, Number(got?.headers.get("retry-after") ?? 1) * 1000));
    }
    assert.equal(got?.status, 201);
    const mine = ((await as(c, "GET", "/v2/sandboxes")).body as unknown[]).length;
    assert.equal(mine, 3, "the key's list and its cap agree");
  });
});

describe("a gateway cut off from Redis", () => {
  test("serves traffic on the routes it read for a bounded time; creates and sandboxes it never routed get a 503", async () => {
    const relay = new Relay();
    await relay.start(Number(new URL(cluster.redisUrl).port));
    const BOUND_S = 6;
    const cut = await cluster.startGateway({
      redisPort: relay.port,
      env: { AENV_GATEWAY_KNOWN_ROUTE_SECS: String(BOUND_S) },
    });
    const known = await Sandbox.create(via(cut));
    const other = await Sandbox.create(via(gw));
    const health = (id: string) =>
      fetch(`${cut}/health`, { headers: { "e2b-sandbox-id": id, "e2b-sandbox-port": "49983" } });
    try {
      assert.equal((await known.commands.run("true")).exitCode, 0);
      const readAt = performance.now();
      // Held, not dropped: what TCP does across a partition (the bytes arrive after the heal).
      relay.cut("hold");
      assert.equal((await known.commands.run("echo still served")).stdout, "still served\n");
      const unknown = await health(other.sandboxId);
      assert.equal(unknown.status, 503, await unknown.text());
      const create = await fetch(`${cut}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": API_KEY, "content-type": "application/json" },
        body: JSON.stringify({ templateID: "base" }),
      });
      assert.equal(create.status, 503);
      assert.match(((await create.json()) as { message: string }).message, /cluster's state \(Redis\) is unavailable/);
      // Past the bound the route is not used any more.
      const left = BOUND_S * 1000 - (performance.now() - readAt);
      if (left > 0) await new Promise((r) => setTimeout(r, left + 200));
      const stale = await health(known.sandboxId);
      assert.equal(stale.status, 503, await stale.text());
      relay.heal();
      assert.equal((await known.commands.run("echo back")).stdout, "back\n");
      assert.equal((await health(other.sandboxId)).status, 204);
    } finally {
      relay.heal();
      for (const s of [known, other]) await s.kill().catch(() => false);
      relay.close();
    }
  });
});

describe("a node cut off from the repository", () => {
  test("keeps its running sandboxes; a pause it cannot commit stays local, is logged as an error and counted, resumes, and is committed once the repository is back", async () => {
    const s3 = await startS3("aenv-cutoff");
    const relay = new Relay();
    await relay.start(Number(new URL(s3.endpoint).port));
    const node = await cluster.startNode(
      "sim-s3",
      {
        AENV_REPOSITORY_BACKEND: "s3",
        AENV_S3_ENDPOINT: `http://127.0.0.1:${relay.port}`,
        AENV_S3_BUCKET: s3.bucket,
        AENV_S3_REGION: "us-east-1",
        AENV_S3_FORCE_PATH_STYLE: "true",
        AWS_ACCESS_KEY_ID: S3_CREDENTIALS.accessKeyId,
        AWS_SECRET_ACCESS_KEY: S3_CREDENTIALS.secretAccessKey,
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
        AENV_PAUSE_COMMIT_DELAY: "0",
      },
      { sim: { slotOctet: octet + 1 } },
    );
    const commits = async (result: "committed" | "failed") => {
      const text = await (await fetch(`${node.url}/metrics`)).text();
      return Number(new RegExp(`^aenv_pause_commits_total\\{result="${result}"\\} (\\d+)`, "m").exec(text)?.[1] ?? 0);
    };
    const until = async (what: string, cond: () => Promise<boolean>) => {
      for (const deadline = Date.now() + 30_000; !(await cond()); ) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}:\n${node.logs().slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    const running = await Sandbox.create(sdkOptions(node));
    const paused = await Sandbox.create(sdkOptions(node));
    try {
      relay.cut("reset");
      assert.equal((await running.commands.run("true")).exitCode, 0);
      assert.equal(await paused.pause(), true);
      await until("a failed commit", async () => (await commits("failed")) >= 1);
      // Counted, then logged: the line comes through the node's stdout, which the metric's
      // answer can overtake.
      const logged = /"level":50[^\n]*"sandboxID":"[^"]+"[^\n]*pause image not committed to the repository/;
      await until("the error line", async () => logged.test(node.logs()));
      assert.equal(await commits("committed"), 0);
      assert.equal((await running.commands.run("true")).exitCode, 0);
      relay.heal();
      // Tried again while it stays paused: committed, so any node can resume it now.
      await until("the commit", async () => (await commits("committed")) >= 1);
      const back = await Sandbox.connect(paused.sandboxId, sdkOptions(node));
      assert.equal((await back.commands.run("true")).exitCode, 0);
    } finally {
      relay.heal();
      for (const s of [running, paused]) await s.kill().catch(() => false);
      await node.stop();
      relay.close();
      await s3.close();
    }
  });
});
