// A pause resumed on another node before its commit to the repository finished (cluster.p2p).
// Real runsc nodes, Redis and gateway. Node A pauses sandboxes with its commits held back (it
// sees the shared repository folder through a read-only bind mount: every upload of its fails,
// and is tried again), then is cut off from Redis through a relay: its
// heartbeat expires and the gateway counts it dead, while A stays up and reachable by the other
// node. A connect through the gateway resumes a pause on B from the manifest A serves, memory
// (a running process, a file in /tmp) intact, with the repository's claim B's and still no
// manifest committed; A, once it rejoins, drops its copy. A manifest that does not name the
// offered pause, and chunks whose bytes do not match their digests, are refused: the sandbox
// is not resumed from them, and resumes once the real holder serves it.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { gatewayProof } from "@aenv/edge/gateway-proof";
import { GATEWAY_PROOF_HEADER } from "@aenv/protocol";
import { Sandbox } from "e2b";
import { Redis } from "ioredis";
import { RepositoryKey } from "../packages/server/src/storage/repository/signing.js";
import { API_KEY, TestCluster, via } from "./helpers/cluster.js";
import { Relay } from "./helpers/relay.js";
import { TEST_REPOSITORY_KEY } from "./helpers/repository.js";
import type { TestServer } from "./helpers/server.js";

const prefix = (process.env.AENV_TEST_NET_PREFIX ?? "app").slice(0, 3);
const slotsA = process.env.AENV_TEST_SLOT_CIDR ?? "10.236.0.0/16";
// Node B needs a range of its own: AENV_TEST_SLOT_CIDR_B, else one far from A's.
const [o1, o2] = slotsA.split(".").map(Number) as [number, number];
const slotsB = process.env.AENV_TEST_SLOT_CIDR_B ?? `${o1}.${(o2 + 156) % 256}.0.0/16`;
const cluster = new TestCluster(prefix);
const relay = new Relay();
let redis: Redis;
/** The repository as node A sees it: read-only. */
let readOnlyRepo = "";
let gateway = "";
let nodeA: TestServer;
let nodeB: TestServer;
/** Paused on A before it was cut off: one resumed from A, one first offered wrong. */
const moved = { id: "", pid: "", secret: "" };
const spoiled = { id: "", pid: "", secret: "" };

const env = { AENV_P2P: "1", AENV_MAX_SANDBOXES: "4" };
const manifestFile = (id: string) => join(cluster.repo, "manifests", `sbx-${id}.json`);

async function until(what: string, cond: () => Promise<boolean>, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** A sandbox on A with a process and a file in /tmp, paused there. */
async function pausedOnA(into: { id: string; pid: string; secret: string }): Promise<void> {
  const s = await Sandbox.create(via(nodeA.url));
  into.id = s.sandboxId;
  into.secret = `kept-${Math.random().toString(36).slice(2)}`;
  await s.commands.run(`echo ${into.secret} > /tmp/mem.txt`);
  await s.commands.run("sleep 100000", { background: true });
  into.pid = (await s.commands.run("pgrep -f 'sleep 100000'")).stdout.trim();
  await until("A's route to be published", async () => (await cluster.ownerOf(into.id)) === "node-a");
  assert.equal(await s.pause(), true);
}

async function connectViaGateway(id: string): Promise<{ status: number; message: string }> {
  const r = await fetch(`${gateway}/sandboxes/${id}/connect`, {
    method: "POST",
    headers: { "x-api-key": API_KEY, "content-type": "application/json" },
    body: JSON.stringify({ timeout: 120 }),
    signal: AbortSignal.timeout(180_000),
  });
  const body = (await r.json().catch(() => ({}))) as { message?: string };
  return { status: r.status, message: body.message ?? "" };
}

async function assertRunsOnB(s: { id: string; pid: string; secret: string }): Promise<void> {
  assert.equal(await cluster.ownerOf(s.id), "node-b");
  const back = await Sandbox.connect(s.id, via(gateway));
  assert.equal((await back.commands.run("cat /tmp/mem.txt")).stdout, `${s.secret}\n`, "its /tmp, from memory");
  assert.equal((await back.commands.run("pgrep -f 'sleep 100000'")).stdout.trim(), s.pid, "the same process");
}

before(async () => {
  await cluster.start();
  await relay.start(Number(new URL(cluster.redisUrl).port));
  redis = new Redis(cluster.redisUrl, { maxRetriesPerRequest: 5 });
  // B first: it lays the repository out, which A then reads and cannot write to.
  nodeB = await cluster.startNode("node-b", { ...env, AENV_NET_PREFIX: `${prefix}b`, AENV_SLOT_CIDR: slotsB });
  readOnlyRepo = mkdtempSync("/var/tmp/ahp-ro-repo-");
  execFileSync("mount", ["--bind", cluster.repo, readOnlyRepo]);
  nodeA = await cluster.startNode("node-a", {
    ...env,
    AENV_CLUSTER: `redis://127.0.0.1:${relay.port}`,
    AENV_REPOSITORY_PATH: readOnlyRepo,
    AENV_NET_PREFIX: `${prefix}a`,
    AENV_SLOT_CIDR: slotsA,
  });
  // Writable while A starts (it checks), read-only from now on (its folder handle included).
  execFileSync("mount", ["-o", "remount,bind,ro", readOnlyRepo]);
  gateway = await cluster.startGateway();
  await pausedOnA(moved);
  await pausedOnA(spoiled);
  for (const s of [moved, spoiled]) {
    const failed = new RegExp(`"sandboxID":"${s.id}"[^\\n]*pause image not committed to the repository`);
    await until(`A's commit of ${s.id} to fail`, async () => failed.test(nodeA.logs()));
    assert.equal(existsSync(manifestFile(s.id)), false, "its commit cannot finish");
    // Offered once its image is written (a pause answers before that).
    await until(`A to offer the pause of ${s.id}`, async () => {
      const offer = JSON.parse((await redis.get(`aenv:pause:${s.id}`)) ?? "{}") as { node?: string };
      return offer.node === "node-a";
    });
  }
  relay.cut("drop");
  await until("A's heartbeat to expire", async () => (await redis.exists("aenv:node:node-a")) === 0, 20_000);
});

after(async () => {
  relay.heal();
  for (const s of [moved, spoiled]) {
    if (s.id) await Sandbox.kill(s.id, via(gateway)).catch(() => false);
  }
  redis?.disconnect();
  try {
    await cluster.close();
  } finally {
    relay.close();
    if (readOnlyRepo) {
      execFileSync("umount", [readOnlyRepo]);
      rmSync(readOnlyRepo, { recursive: true, force: true });
    }
  }
});

describe("a pause resumed elsewhere before its commit finished", () => {
  test("resumes on B from the manifest A serves, memory intact; B holds the claim; nothing committed", async (t) => {
    const t0 = Date.now();
    const ans = await connectViaGateway(moved.id);
    assert.equal(ans.status < 300, true, `${ans.status} ${ans.message}`);
    t.diagnostic(`resumed on B from A's offer ${Date.now() - t0} ms after the connect`);
    await assertRunsOnB(moved);
    assert.match(nodeB.logs(), new RegExp(`"sandboxID":"${moved.id}"[^\\n]*pause image rebuilt from a peer`));
    assert.match(nodeA.logs(), new RegExp(`"sandboxID":"${moved.id}"[^\\n]*pause manifest sent to a peer`));
    const claims = cluster.claimsOf(moved.id);
    assert.equal(claims.length, 1, "one pause, one claim");
    assert.match(claims[0] ?? "", /node-b/);
    assert.equal(existsSync(manifestFile(moved.id)), false, "A's commit never ran");
    assert.equal(await redis.get(`aenv:pause:${moved.id}`), null, "the offer is withdrawn once resumed");
    // A runs nothing of it: its copy stays paused until it learns of B's claim, then goes.
    const onA = await nodeA.api("GET", `/sandboxes/${moved.id}`);
    assert.ok(
      onA.status === 404 || (onA.body as { state?: string }).state === "paused",
      `${onA.status} ${JSON.stringify(onA.body)}`,
    );
  });

  test("the pause route is the operator's: a tenant gets 403, a hostile name 400", async () => {
    const key = await fetch(`${gateway}/api-keys`, {
      method: "POST",
      headers: { "x-api-key": API_KEY, "content-type": "application/json" },
      body: JSON.stringify({ name: "tenant-p2p" }),
    });
    assert.equal(key.status, 201);
    const tenant = ((await key.json()) as { key: string }).key;
    // As a gateway would pass it on (a node refuses a tenant's key without that at all).
    const r = await fetch(`${nodeB.url}/cluster/pauses/${spoiled.id}`, {
      headers: { "x-api-key": tenant, [GATEWAY_PROOF_HEADER]: gatewayProof(API_KEY, tenant) },
    });
    assert.equal(r.status, 403);
    assert.match(((await r.json()) as { message: string }).message, /operator's/);
    for (const bad of ["..%2F..%2Fetc", "sbx-abc", `${spoiled.id}x`]) {
      const r = await fetch(`${nodeA.url}/cluster/pauses/${bad}`, { headers: { "x-api-key": API_KEY } });
      assert.equal(r.status, 400, bad);
    }
  });

  test("a manifest not naming the offered pause, and chunks that do not match their digests, are refused", async () => {
    const real = (await redis.get(`aenv:pause:${spoiled.id}`)) ?? assert.fail("A's offer");
    const { tag } = JSON.parse(real) as { tag: string };
    const sealed = await (
      await fetch(`${nodeA.url}/cluster/pauses/${spoiled.id}`, { headers: { "x-api-key": API_KEY } })
    ).arrayBuffer();
    const key = `manifests/sbx-${spoiled.id}.json`;
    const clusterKey = new RepositoryKey(TEST_REPOSITORY_KEY);
    const manifest = clusterKey.open("manifest", key, Buffer.from(sealed)) as {
      meta: { sandbox: { pauseTag?: string } };
    };
    assert.equal(manifest.meta.sandbox.pauseTag, tag, "A's manifest names its pause");
    // Sealed right (whoever holds the key), but for another pause of the sandbox.
    const other = clusterKey.seal("manifest", key, {
      ...manifest,
      meta: { ...manifest.meta, sandbox: { ...manifest.meta.sandbox, pauseTag: "0123456789ab" } },
    });
    let mode: "other-pause" | "spoiled-chunks" = "other-pause";
    let chunksSent = 0;
    const fake: Server = createServer(async (req, res) => {
      if (req.url === `/cluster/pauses/${spoiled.id}`) {
        res.writeHead(200).end(mode === "other-pause" ? other : Buffer.from(sealed));
        return;
      }
      const r = await fetch(`${nodeA.url}${req.url}`, { headers: { "x-api-key": API_KEY } });
      const data = Buffer.from(await r.arrayBuffer());
      // Same size, other bytes: only its digest tells.
      if (r.status === 200) data[0] = (data[0] ?? 0) ^ 0xff;
      chunksSent++;
      res.writeHead(r.status).end(data);
    });
    await new Promise<void>((r) => fake.listen(0, "127.0.0.1", r));
    const fakeUrl = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
    try {
      await redis.set(`aenv:pause:${spoiled.id}`, JSON.stringify({ node: "node-a", url: fakeUrl, tag }));
      const first = await connectViaGateway(spoiled.id);
      assert.ok(first.status >= 500, `${first.status} ${first.message}`);
      // The line comes through B's stdout, which the answer can overtake.
      const refused = /is not the one the cluster offers[^\n]*pause manifest from a peer refused/;
      await until("B's refusal to be logged", async () => refused.test(nodeB.logs()), 10_000);
      assert.notEqual(await cluster.ownerOf(spoiled.id), "node-b");

      mode = "spoiled-chunks";
      const second = await connectViaGateway(spoiled.id);
      assert.ok(second.status >= 500, `${second.status} ${second.message}`);
      assert.ok(chunksSent > 0, "B asked the peer for the chunks");
      assert.match(second.message, /chunk [0-9a-f]{64} is missing/, "refused, and the repository has none");
      // B took its record over but runs nothing it could not verify: still paused. Nor did it
      // claim the pause: A drops its copy once another node holds the claim (its next commit
      // retry looks), and a claim without the image would have lost the pause.
      const onB = await nodeB.api("GET", `/sandboxes/${spoiled.id}`);
      assert.equal((onB.body as { state?: string }).state, "paused");
      assert.deepEqual(cluster.claimsOf(spoiled.id), [], "no claim without the whole image");

      // The real holder again: resumed, memory intact.
      await redis.set(`aenv:pause:${spoiled.id}`, real);
      const third = await connectViaGateway(spoiled.id);
      assert.equal(third.status < 300, true, `${third.status} ${third.message}`);
      await assertRunsOnB(spoiled);
    } finally {
      fake.close();
    }
  });

  test("A, back in the cluster, drops its copies: each sandbox is held by one node", async () => {
    relay.heal();
    for (const s of [moved, spoiled]) {
      await until(
        `A to drop its copy of ${s.id}`,
        async () => (await nodeA.api("GET", `/sandboxes/${s.id}`)).status === 404,
        60_000,
      );
      assert.equal((await nodeB.api("GET", `/sandboxes/${s.id}`)).status, 200);
      assert.equal(await cluster.ownerOf(s.id), "node-b", "never taken back");
    }
    // Its next commit attempt reads B's claim, or its first beat finds B's routes.
    assert.match(nodeA.logs(), /paused sandbox superseded|pause sent to a peer was resumed there/);
    for (const s of [moved, spoiled]) assert.equal(existsSync(manifestFile(s.id)), false, "no stale commit");
  });
});
