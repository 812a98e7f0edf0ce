// GET /metrics (Prometheus) on a cluster node and on a gateway, with real traffic: the e2b SDK
// through the gateway creates, pauses, resumes, snapshots and forks. Every metric the docs
// promise must be scraped (a missing one fails), every aenv_ metric scraped must be in
// docs/deployment.md, and the operations must show up in the histograms.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { startRedis } from "./helpers/cluster.js";
import { cleanupDataDir, freePort, ROOT, startServer, type TestServer } from "./helpers/server.js";

const KEY = "e2b_0123456789abcdef0123456789abcdef01234567";
const NET = {
  AENV_NET_PREFIX: process.env.AENV_TEST_METRICS_NET_PREFIX ?? "aeq",
  AENV_SLOT_CIDR: process.env.AENV_TEST_METRICS_SLOT_CIDR ?? "10.209.0.0/16",
};

/** Every metric a node serves (docs/deployment.md#metrics). */
const NODE_METRICS = [
  "aenv_sandboxes",
  "aenv_sandbox_operation_duration_seconds",
  "aenv_sandbox_operation_failures_total",
  "aenv_warm_image_requests_total",
  "aenv_sweeps_total",
  "aenv_pause_commits_total",
  "aenv_chunk_cache_requests_total",
  "aenv_chunk_cache_bytes",
  "aenv_repository_bytes_total",
  "aenv_proxy_requests_total",
  "aenv_proxy_errors_total",
  "aenv_api_requests_total",
  "aenv_node_capacity_sandboxes",
  "aenv_node_allocated_cpus",
  "aenv_node_allocated_memory_bytes",
  "aenv_node_ready",
  "aenv_node_draining",
];
/** Every metric a gateway serves. */
const GATEWAY_METRICS = [
  "aenv_proxy_requests_total",
  "aenv_proxy_errors_total",
  "aenv_api_requests_total",
  "aenv_gateway_nodes",
  "aenv_gateway_cluster_sandboxes",
  "aenv_gateway_cluster_capacity_sandboxes",
];

/** Prometheus text -> sample name with labels -> value, plus the declared metric families. */
function parseMetrics(text: string): { families: Map<string, string>; samples: Map<string, number> } {
  const families = new Map<string, string>();
  const samples = new Map<string, number>();
  for (const line of text.split("\n")) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) families.set(t[1] as string, t[2] as string);
    else if (line && !line.startsWith("#")) {
      const i = line.lastIndexOf(" ");
      samples.set(line.slice(0, i), Number(line.slice(i + 1)));
    }
  }
  return { families, samples };
}

async function scrape(url: string) {
  const r = await fetch(`${url}/metrics`); // no key: /metrics is open like /health
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  return parseMetrics(await r.text());
}

const value = (m: Map<string, number>, sample: string) => m.get(sample) ?? Number.NaN;

let redis: ChildProcess;
let node: TestServer;
let gateway: ChildProcess;
let gw = "";

before(async () => {
  const rport = await freePort();
  redis = await startRedis(rport);
  node = await startServer({
    env: {
      ...NET,
      AENV_CLUSTER: `redis://127.0.0.1:${rport}`,
      AENV_NODE_ID: "metrics-node",
      AENV_MAX_SANDBOXES: "7",
      AENV_GC_INTERVAL: "0",
    },
  });
  const gport = await freePort();
  gateway = spawn(
    process.execPath,
    [
      join(ROOT, "packages/gateway/bin/aenv-gateway.js"),
      "--listen",
      `127.0.0.1:${gport}`,
      "--cluster",
      `redis://127.0.0.1:${rport}`,
    ],
    { env: { ...process.env, AENV_API_KEY: KEY }, stdio: "ignore" },
  );
  gw = `http://127.0.0.1:${gport}`;
  for (let i = 0; i < 100; i++) {
    const r = await fetch(`${gw}/nodes`, { headers: { "x-api-key": KEY } }).catch(() => undefined);
    if (r?.status === 200 && ((await r.json()) as unknown[]).length === 1) break;
    await new Promise((res) => setTimeout(res, 100));
  }
});

after(async () => {
  gateway?.kill("SIGKILL");
  if (node) {
    await node.stop();
    cleanupDataDir(node);
  }
  redis?.kill("SIGKILL");
});

describe("GET /metrics", () => {
  test("a node: every metric, and create/pause/resume/snapshot/fork observed", async () => {
    const opts = { apiUrl: gw, sandboxUrl: gw, apiKey: KEY };
    const sbx = await Sandbox.create(opts);
    const made: string[] = [sbx.sandboxId];
    try {
      assert.equal((await sbx.commands.run("echo hi")).stdout, "hi\n");
      const running = await scrape(node.url);
      assert.equal(value(running.samples, 'aenv_sandboxes{state="running"}'), 1);
      assert.equal(value(running.samples, "aenv_node_capacity_sandboxes"), 7);
      assert.ok(value(running.samples, "aenv_node_allocated_cpus") > 0);
      await sbx.pause();
      assert.equal(value((await scrape(node.url)).samples, 'aenv_sandboxes{state="paused"}'), 1);
      await Sandbox.connect(sbx.sandboxId, opts);
      const snap = await fetch(`${gw}/sandboxes/${sbx.sandboxId}/snapshots`, {
        method: "POST",
        headers: { "x-api-key": KEY, "content-type": "application/json" },
        body: "{}",
      });
      assert.equal(snap.status, 201, await snap.clone().text());
      const fork = await fetch(`${gw}/sandboxes/${sbx.sandboxId}/fork`, {
        method: "POST",
        headers: { "x-api-key": KEY, "content-type": "application/json" },
        body: JSON.stringify({ count: 1 }),
      });
      assert.equal(fork.status, 201, await fork.clone().text());
      for (const c of (await fork.json()) as Array<{ sandbox?: { sandboxID: string } }>) {
        if (c.sandbox) made.push(c.sandbox.sandboxID);
      }
      // Missing sandboxes: a failed pause, a 404 on the control plane.
      assert.equal(
        (await fetch(`${node.url}/sandboxes/nope/pause`, { method: "POST", headers: { "x-api-key": KEY } })).status,
        404,
      );

      // The snapshot's chunks are committed in the background.
      let m = await scrape(node.url);
      for (let i = 0; i < 100 && !(value(m.samples, 'aenv_repository_bytes_total{direction="out"}') > 0); i++) {
        await new Promise((res) => setTimeout(res, 100));
        m = await scrape(node.url);
      }
      for (const name of NODE_METRICS) assert.ok(m.families.has(name), `node serves ${name}`);
      for (const op of ["create", "pause", "resume", "snapshot", "fork"]) {
        const n = value(m.samples, `aenv_sandbox_operation_duration_seconds_count{operation="${op}"}`);
        assert.ok(n >= 1, `${op} observed (${n})`);
      }
      assert.equal(m.families.get("aenv_sandbox_operation_duration_seconds"), "histogram");
      assert.ok(value(m.samples, 'aenv_sandbox_operation_failures_total{operation="pause"}') >= 1);
      assert.ok(value(m.samples, 'aenv_repository_bytes_total{direction="out"}') > 0, "commits counted");
      const warm =
        value(m.samples, 'aenv_warm_image_requests_total{result="hit"}') +
        value(m.samples, 'aenv_warm_image_requests_total{result="miss"}');
      assert.ok(warm >= 1, "the create asked for a warm image");
      assert.ok(value(m.samples, 'aenv_proxy_requests_total{protocol="http"}') >= 1, "envd traffic via the proxy");
      assert.ok(value(m.samples, 'aenv_api_requests_total{status_class="2xx"}') >= 1);
      assert.ok(value(m.samples, 'aenv_api_requests_total{status_class="4xx"}') >= 1);
      assert.equal(value(m.samples, "aenv_node_ready"), 1);
      assert.equal(value(m.samples, "aenv_node_draining"), 0);
      assert.ok(m.samples.has('aenv_chunk_cache_requests_total{result="hit"}'));
      assert.ok(m.samples.has('aenv_chunk_cache_bytes{kind="max"}'));
      assert.ok(m.families.has("process_cpu_seconds_total"), "process metrics too");
    } finally {
      await Promise.all(made.map((id) => Sandbox.kill(id, opts).catch(() => false)));
    }
  });

  test("a gateway: every metric, the cluster's nodes and its traffic", async () => {
    const m = await scrape(gw);
    for (const name of GATEWAY_METRICS) assert.ok(m.families.has(name), `gateway serves ${name}`);
    assert.ok(!m.families.has("aenv_sandbox_operation_duration_seconds"), "node metrics stay on nodes");
    assert.equal(value(m.samples, 'aenv_gateway_nodes{status="ready"}'), 1);
    assert.equal(value(m.samples, "aenv_gateway_cluster_capacity_sandboxes"), 7);
    assert.ok(value(m.samples, 'aenv_proxy_requests_total{protocol="http"}') >= 1);
    assert.ok(value(m.samples, 'aenv_api_requests_total{status_class="2xx"}') >= 1);
    assert.equal((await fetch(`${gw}/nodes`)).status, 401, "the rest still needs the key");
  });

  test("docs/deployment.md lists every metric served", async () => {
    const docs = readFileSync(join(ROOT, "docs/deployment.md"), "utf8");
    const served = new Set([...(await scrape(node.url)).families.keys(), ...(await scrape(gw)).families.keys()]);
    for (const name of [...served].filter((n) => n.startsWith("aenv_"))) {
      assert.ok(docs.includes(`\`${name}\``), `docs/deployment.md lists ${name}`);
    }
  });
});
