// E2B routes answered by a node's route plugins and merged by the gateway, without a sandbox:
// batch metrics (GET /sandboxes/metrics), X-Total-Running on GET /v2/sandboxes, template
// updates (PATCH /templates/{id}, /v2/templates/{id}) and build logs
// (GET /templates/{id}/builds/{buildID}/logs). The node's routes run on a stand-in
// orchestrator; the gateway runs for real against stand-in nodes and a stand-in Redis.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { keys, type NodeInfo } from "@aenv/edge/cluster-keys";
import { httpLimitsFromEnv } from "@aenv/edge/http-config";
import { BatchMetricsQuery, MAX_BATCH_METRICS_IDS } from "@aenv/protocol/rest";
import Fastify, { type FastifyInstance } from "fastify";
import type { Redis } from "ioredis";
import pino from "pino";
import { buildGateway } from "../../gateway/src/app.js";
import { installErrorHandling } from "../src/api/error-handler.js";
import { sandboxRoutes } from "../src/api/routes/sandboxes.js";
import { templateRoutes } from "../src/api/routes/templates.js";
import type { ServerConfig } from "../src/config.js";
import type { MetricSample } from "../src/orchestrator/metrics.js";
import { MetricsHistory } from "../src/orchestrator/metrics-history.js";
import type { NodeContext } from "../src/orchestrator/node-context.js";
import type { Orchestrator } from "../src/orchestrator/orchestrator.js";
import type { SandboxRecord } from "../src/state/store.js";
import { TemplateStore } from "../src/state/template-catalog.js";
import type { BuildRecord } from "../src/templates/build-log.js";
import { TemplateBuilder } from "../src/templates/builder.js";
import { asOperator } from "./helpers/tenants.js";

const KEY = "e2b_0123456789abcdef0123456789abcdef01234567";
const auth = { "x-api-key": KEY };
const dir = mkdtempSync(join(tmpdir(), "aenv-batch-routes-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const sid = (n: number) => `i${String(n).padStart(20, "0")}`;
const sample = (cpuUsedPct: number): MetricSample => ({
  timestampUnix: 1_700_000_000,
  cpuCount: 1,
  cpuUsedPct,
  memUsed: 1,
  memTotal: 2,
  memCache: 0,
  diskUsed: 3,
  diskTotal: 4,
});
const record = (id: string, state: "running" | "paused", startedAt: number) =>
  ({
    id,
    state,
    startedAt,
    endAt: startedAt + 60_000,
    templateId: "base",
    alias: "base",
    clientId: "c",
    cpuCount: 1,
    memoryMB: 512,
    diskSizeMB: 1024,
    metadata: {},
  }) as unknown as SandboxRecord;

/** A node's sandbox routes over a stand-in orchestrator holding `recs`, with samples for `metrics`. */
async function sandboxApi(recs: SandboxRecord[], metrics: Record<string, MetricSample>): Promise<FastifyInstance> {
  const orch = {
    list: () => recs,
    placeOf: () => ({ nodeID: "n" }),
    latestMetrics: async (ids: string[]) => new Map(ids.flatMap((id) => (metrics[id] ? [[id, metrics[id]]] : []))),
    get: (id: string) => {
      throw new Error(`GET /sandboxes/${id} reached the single-sandbox route`);
    },
  } as unknown as Orchestrator;
  const app = Fastify();
  installErrorHandling(app);
  asOperator(app);
  await app.register(sandboxRoutes, {
    orch,
    onDemand: {} as never,
    ctx: { domain: "test" },
    secretBinding: () => undefined,
  });
  return app;
}

describe("GET /sandboxes/metrics on a node", () => {
  test("the query: comma-separated or repeated, duplicates once, 1 to 100 IDs of a sandbox ID's form", () => {
    assert.deepEqual(BatchMetricsQuery.parse({ sandbox_ids: "a,b,a" }).sandbox_ids, ["a", "b"]);
    assert.deepEqual(BatchMetricsQuery.parse({ sandbox_ids: ["a,b", "c"] }).sandbox_ids, ["a", "b", "c"]);
    const many = Array.from({ length: MAX_BATCH_METRICS_IDS + 1 }, (_, i) => sid(i)).join(",");
    for (const bad of [{}, { sandbox_ids: "" }, { sandbox_ids: "," }, { sandbox_ids: "a/b" }, { sandbox_ids: many }]) {
      assert.equal(BatchMetricsQuery.safeParse(bad).success, false, JSON.stringify(bad).slice(0, 80));
    }
  });

  test("answers the latest sample of each running sandbox by ID; others are left out", async () => {
    const app = await sandboxApi([], { [sid(1)]: sample(12.5), [sid(2)]: sample(1) });
    const r = await app.inject({ url: `/sandboxes/metrics?sandbox_ids=${sid(1)},${sid(2)},${sid(3)}` });
    assert.equal(r.statusCode, 200, r.body);
    const body = r.json() as { sandboxes: Record<string, { cpuUsedPct: number; timestamp: string }> };
    assert.deepEqual(Object.keys(body.sandboxes).sort(), [sid(1), sid(2)]);
    assert.equal(body.sandboxes[sid(1)]?.cpuUsedPct, 12.5);
    assert.equal(body.sandboxes[sid(1)]?.timestamp, new Date(1_700_000_000_000).toISOString());
    const none = await app.inject({ url: `/sandboxes/metrics?sandbox_ids=${sid(9)}` });
    assert.deepEqual(none.json(), { sandboxes: {} });
  });

  test("a bad query is a 400 that says what is wrong", async () => {
    const app = await sandboxApi([], {});
    const missing = await app.inject({ url: "/sandboxes/metrics" });
    assert.equal(missing.statusCode, 400);
    assert.match(missing.json().message, /sandbox_ids/);
    const many = Array.from({ length: 101 }, (_, i) => sid(i)).join(",");
    const tooMany = await app.inject({ url: `/sandboxes/metrics?sandbox_ids=${many}` });
    assert.equal(tooMany.statusCode, 400);
    assert.match(tooMany.json().message, /at most 100/);
    const bad = await app.inject({ url: "/sandboxes/metrics?sandbox_ids=..%2Fx" });
    assert.equal(bad.statusCode, 400);
    assert.match(bad.json().message, /not a sandbox ID/);
  });
});

test("the latest sample: kept, or taken now for a running sandbox with none; none for paused, helpers, unknown", async () => {
  const live = new Map<string, object>([
    [sid(1), { rec: { ...record(sid(1), "running", 1), runtimeId: "r1" }, lastMetric: sample(50) }],
    [sid(2), { rec: { ...record(sid(2), "running", 1), runtimeId: "r2" } }],
    [sid(3), { rec: record(sid(3), "paused", 1), lastMetric: sample(5) }],
    // Hibernated and saved to disk: paused underneath, running to its clients.
    [sid(4), { rec: { ...record(sid(4), "paused", 1), pause: { idleSaved: true } }, lastMetric: sample(7) }],
    [sid(5), { rec: record(sid(5), "running", 1), ephemeral: true, lastMetric: sample(9) }],
  ]);
  const history = new MetricsHistory({
    registry: { get: (id: string) => live.get(id) } as never,
    driver: { stats: async () => ({ cpuUsedPct: 25, memUsedBytes: 10, memCacheBytes: 0 }) } as never,
    cfg: { metricsIntervalS: 0 } as ServerConfig,
    log: pino({ level: "silent" }),
  } as unknown as NodeContext);
  assert.equal((await history.latest(sid(1)))?.cpuUsedPct, 50);
  assert.equal((await history.latest(sid(2)))?.cpuUsedPct, 25, "sampled now");
  assert.equal(await history.latest(sid(3)), undefined);
  assert.equal((await history.latest(sid(4)))?.cpuUsedPct, 7);
  assert.equal(await history.latest(sid(5)), undefined);
  assert.equal(await history.latest(sid(6)), undefined);
});

describe("X-Total-Running on GET /v2/sandboxes", () => {
  const recs = [record(sid(1), "running", 1), record(sid(2), "running", 2), record(sid(3), "paused", 3)];

  test("counts the running matches before pagination, only when running ones were asked for", async () => {
    const app = await sandboxApi(recs, {});
    const page = await app.inject({ url: "/v2/sandboxes?limit=1" });
    assert.equal(page.statusCode, 200);
    assert.equal(page.json().length, 1);
    assert.equal(page.headers["x-total-running"], "2");
    assert.equal((await app.inject({ url: "/v2/sandboxes?state=running" })).headers["x-total-running"], "2");
    const paused = await app.inject({ url: "/v2/sandboxes?state=paused" });
    assert.equal(paused.headers["x-total-running"], undefined);
  });
});

describe("template updates and build logs", () => {
  const templates = new TemplateStore(join(dir, "templates"));
  const builder = new TemplateBuilder({
    templates,
    orch: {} as never,
    files: {} as never,
    images: {} as never,
    allowHostImageSources: false,
    log: pino({ level: "silent" }),
  });
  const t = templates.save({ id: "tpl0000000000000000a", name: "mine", buildId: "b-1" });
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString();
  const build: BuildRecord = {
    templateID: t.id,
    buildID: "b-1",
    status: "ready",
    startedAt: at(0),
    logs: [
      { timestamp: at(1), level: "info", message: "one" },
      { timestamp: at(2), level: "warn", message: "two", step: "run" },
      { timestamp: at(3), level: "debug", message: "three" },
      { timestamp: at(4), level: "error", message: "four" },
    ],
  };
  mkdirSync(join(t.dir, "builds"), { recursive: true });
  writeFileSync(join(t.dir, "builds", "b-1.json"), JSON.stringify(build));

  async function api(): Promise<FastifyInstance> {
    const app = Fastify();
    installErrorHandling(app);
    asOperator(app);
    await app.register(templateRoutes, { templates, builder, files: {} as never, orch: {} as never });
    return app;
  }

  test("PATCH /templates/{id} (200, no body) and /v2 (200, its names) set public; the template shows it", async () => {
    const app = await api();
    const v1 = await app.inject({ method: "PATCH", url: "/templates/mine", payload: { public: true } });
    assert.equal(v1.statusCode, 200, v1.body);
    assert.equal(v1.body, "");
    assert.equal(templates.get("mine")?.public, true);
    assert.equal((await app.inject({ url: `/templates/${t.id}` })).json().public, true);
    const v2 = await app.inject({ method: "PATCH", url: `/v2/templates/${t.id}`, payload: { public: false } });
    assert.equal(v2.statusCode, 200, v2.body);
    assert.deepEqual(v2.json(), { names: ["mine"] });
    assert.equal(templates.get("mine")?.public, false);
    // An empty body sets nothing, and unknown fields are ignored, as E2B's other bodies are.
    const empty = await app.inject({ method: "PATCH", url: "/v2/templates/mine", payload: { other: 1 } });
    assert.equal(empty.statusCode, 200);
    assert.equal(templates.get("mine")?.public, false);
  });

  test("PATCH: 404 for an unknown template, 400 for a bad body", async () => {
    const app = await api();
    for (const url of ["/templates/nope", "/v2/templates/nope"]) {
      const r = await app.inject({ method: "PATCH", url, payload: { public: true } });
      assert.equal(r.statusCode, 404, url);
    }
    for (const payload of [{ public: "yes" }, [true]]) {
      const r = await app.inject({ method: "PATCH", url: "/v2/templates/mine", payload });
      assert.equal(r.statusCode, 400, JSON.stringify(payload));
      assert.match(r.json().message, /invalid request/);
    }
  });

  test("build logs: level at least, cursor (ms) with direction, limit; 404 for an unknown build", async () => {
    const app = await api();
    const logs = async (q: string) => {
      const r = await app.inject({ url: `/templates/mine/builds/b-1/logs${q}` });
      assert.equal(r.statusCode, 200, r.body);
      return (r.json() as { logs: Array<{ message: string }> }).logs.map((e) => e.message);
    };
    assert.deepEqual(await logs(""), ["one", "two", "three", "four"]);
    assert.deepEqual(await logs("?level=warn"), ["two", "four"]);
    assert.deepEqual(await logs(`?cursor=${Date.parse(at(2))}`), ["two", "three", "four"]);
    assert.deepEqual(await logs(`?cursor=${Date.parse(at(3))}&direction=backward&limit=2`), ["three", "two"]);
    assert.deepEqual(await logs("?direction=backward&limit=1&source=persistent"), ["four"]);
    const first = (await app.inject({ url: "/templates/mine/builds/b-1/logs?limit=1" })).json();
    assert.deepEqual(first, { logs: [{ timestamp: at(1), level: "info", message: "one" }] });
    assert.equal((await app.inject({ url: "/templates/mine/builds/b-2/logs" })).statusCode, 404);
    assert.equal((await app.inject({ url: "/templates/nope/builds/b-1/logs" })).statusCode, 404);
    assert.equal((await app.inject({ url: "/templates/mine/builds/b-1/logs?level=loud" })).statusCode, 400);
  });
});

describe("the gateway merges batch metrics and X-Total-Running across nodes", () => {
  /** A stand-in node: its own sandboxes' metrics and list, as a node answers them. */
  async function node(ids: string[], states: Record<string, "running" | "paused">, asked: string[][]) {
    const app = Fastify();
    app.get("/sandboxes/metrics", async (req) => {
      const want = String((req.query as { sandbox_ids: string }).sandbox_ids).split(",");
      asked.push(want);
      // A node would never answer for another's sandbox; this one tries, the gateway must drop it.
      return { sandboxes: Object.fromEntries([...want, sid(99)].map((id) => [id, { cpuUsedPct: 1, nodeOf: ids[0] }])) };
    });
    // As a node answers: its own running matches counted before its page (the gateway adds
    // them up), and one page.
    app.get("/v2/sandboxes", async (req, reply) => {
      const q = req.query as { state?: string; limit?: string };
      const wanted = (q.state ?? "running,paused").split(",");
      const items = ids
        .filter((id) => wanted.includes(states[id] ?? ""))
        .map((id, i) => ({ sandboxID: id, startedAt: new Date(i * 1000).toISOString(), state: states[id] }));
      if (wanted.includes("running")) {
        void reply.header("x-total-running", String(items.filter((x) => x.state === "running").length));
      }
      return items.slice(0, Number(q.limit ?? 100));
    });
    await app.listen({ host: "127.0.0.1", port: 0 });
    const a = app.server.address() as { port: number };
    return { app, url: `http://127.0.0.1:${a.port}` };
  }

  test("each owning node is asked once for its own; unknown IDs are left out; bad queries are 400", async () => {
    const askedA: string[][] = [];
    const askedB: string[][] = [];
    const a = await node([sid(1), sid(2)], { [sid(1)]: "running", [sid(2)]: "paused" }, askedA);
    const b = await node([sid(3)], { [sid(3)]: "running" }, askedB);
    const info = (nodeID: string, url: string) => JSON.stringify({ nodeID, url, status: "ready" } as NodeInfo);
    const kv = new Map<string, string>([
      [keys.node("a"), info("a", a.url)],
      [keys.node("b"), info("b", b.url)],
      [keys.sandbox(sid(1)), "a"],
      [keys.sandbox(sid(2)), "a"],
      [keys.sandbox(sid(3)), "b"],
      [keys.sandbox(sid(4)), "gone"],
    ]);
    const redis = {
      smembers: async () => ["a", "b"],
      mget: async (ks: string[]) => ks.map((k) => kv.get(k) ?? null),
      get: async (k: string) => kv.get(k) ?? null,
    } as unknown as Redis;
    const gw = buildGateway({ redis, apiKey: KEY, log: pino({ level: "silent" }), limits: httpLimitsFromEnv({}) });
    await gw.listen({ host: "127.0.0.1", port: 0 });
    const url = `http://127.0.0.1:${(gw.server.address() as { port: number }).port}`;
    try {
      const ids = [sid(1), sid(2), sid(3), sid(4), sid(5)].join(",");
      const r = await fetch(`${url}/sandboxes/metrics?sandbox_ids=${ids}`, { headers: auth });
      assert.equal(r.status, 200);
      const body = (await r.json()) as { sandboxes: Record<string, { nodeOf: string }> };
      assert.deepEqual(Object.keys(body.sandboxes).sort(), [sid(1), sid(2), sid(3)]);
      assert.equal(body.sandboxes[sid(3)]?.nodeOf, sid(3));
      assert.deepEqual(askedA, [[sid(1), sid(2)]]);
      assert.deepEqual(askedB, [[sid(3)]]);
      assert.match(r.headers.get("x-aenv-partial") ?? "", new RegExp(`unreachable nodes: ${sid(4)}`));
      const bad = await fetch(`${url}/sandboxes/metrics?sandbox_ids=`, { headers: auth });
      assert.equal(bad.status, 400);
      assert.match(((await bad.json()) as { message: string }).message, /sandbox_ids/);
      assert.equal((await fetch(`${url}/sandboxes/metrics?sandbox_ids=${sid(1)}`)).status, 401);

      const list = await fetch(`${url}/v2/sandboxes?limit=1`, { headers: auth });
      assert.equal(list.status, 200);
      assert.equal(((await list.json()) as unknown[]).length, 1);
      assert.equal(list.headers.get("x-total-running"), "2", "running on both nodes, before pagination");
      const paused = await fetch(`${url}/v2/sandboxes?state=paused`, { headers: auth });
      assert.equal(paused.headers.get("x-total-running"), null);
      const badState = await fetch(`${url}/v2/sandboxes?state=asleep`, { headers: auth });
      assert.equal(badState.status, 400);
    } finally {
      await gw.close();
      await a.app.close();
      await b.app.close();
    }
  });
});
