/**
 * Cluster at scale, by simulation: Redis, two gateways and N aenv-server nodes on the sim
 * runtime (`runtime.driver = sim`: sandboxes are records with an envd stand-in, their
 * operations take the times measured on runsc; everything else is the real node), all
 * processes on this host, and M sandboxes created through the gateways. Measures creates/s
 * and create latency through the gateways, listing all of them (paginated, and filtered by
 * metadata), Redis commands and bytes per create, the gateways' CPU per 1,000 requests, the
 * time until the paused sandboxes of a node killed with -9 are resumed on others, and the
 * RSS of a gateway and a node at the end.
 *
 *   tini -s -- node --import tsx bench/cluster-scale.ts      (part of `npm run bench`)
 *   BENCH_SCALE_NODES=50 BENCH_SCALE_SANDBOXES=10000 npm run bench -- cluster-scale
 *
 * Env: BENCH_SCALE_NODES (4), BENCH_SCALE_SANDBOXES (200), BENCH_SCALE_CONCURRENCY (creates
 * in flight, 32), BENCH_SCALE_PAUSED (paused sandboxes on the node that is killed, 200, at
 * most what it holds), BENCH_SCALE_LIST_N (list samples, 20), BENCH_SCALE_LATENCY (the sim
 * runtime's latency scale, 1), BENCH_SCALE_WALKS (full walks of the list among the samples, 3),
 * BENCH_SCALE_SLOT_OCTET (first loopback range, 127.X; 150).
 * BENCH_SMOKE=1 shrinks it to 2 nodes and 20 sandboxes.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { Redis } from "ioredis";
import { API_KEY, TestCluster, via } from "../test/helpers/cluster.js";
import { cpuMs, type RedisCounters, redisCounters, redisDelta, rssMiB } from "./host-probes.js";
import { benchLog, envNum, finishMeta, hostMeta } from "./meta.js";
import { RESULTS } from "./paths.js";
import { untilQuiet } from "./settle.js";
import { percentile } from "./stats.js";

const SMOKE = process.env.BENCH_SMOKE === "1";
const NODES = envNum("BENCH_SCALE_NODES", SMOKE ? 2 : 4);
const SANDBOXES = envNum("BENCH_SCALE_SANDBOXES", SMOKE ? 20 : 200);
const CONCURRENCY = envNum("BENCH_SCALE_CONCURRENCY", 32);
const PAUSED = envNum("BENCH_SCALE_PAUSED", SMOKE ? 5 : 200);
const LIST_N = envNum("BENCH_SCALE_LIST_N", SMOKE ? 2 : 20);
/** Full walks of the list among the samples: each is M / 100 page requests. */
const WALKS = envNum("BENCH_SCALE_WALKS", 3);
const LATENCY = Number(process.env.BENCH_SCALE_LATENCY ?? 1);
const OCTET = envNum("BENCH_SCALE_SLOT_OCTET", 150);
/** Nodes started at once: each start costs a core for about a second. */
const START_BATCH = 5;
const GROUPS = 10;

const log = benchLog("cluster-scale");
const errors: string[] = [];
const started = Date.now();
const meta = hostMeta({
  nodes: NODES,
  sandboxes: SANDBOXES,
  concurrency: CONCURRENCY,
  paused: PAUSED,
  listN: LIST_N,
  latencyScale: LATENCY,
});
const ms = (t0: number) => performance.now() - t0;
const round = (x: number, d = 1) => (Number.isFinite(x) ? Math.round(x * 10 ** d) / 10 ** d : null);

async function api(url: string, method: string, path: string, body?: unknown) {
  const r = await fetch(`${url}${path}`, {
    method,
    headers: { "x-api-key": API_KEY, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, text };
}

/** Runs fn over items with at most `limit` in flight. */
async function pool<T>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i] as T, i);
      }
    }),
  );
}

interface Out {
  nodes: number;
  sandboxes: number;
  created: number;
  createFailures: number;
  createsPerSec: number | null;
  createP50Ms: number | null;
  createP99Ms: number | null;
  listPageP50Ms: number | null;
  listP99Ms: number | null;
  listFullWalkP50Ms: number | null;
  listFullWalkPages: number | null;
  listFilteredP50Ms: number | null;
  listFilteredP99Ms: number | null;
  redisCommandsPerCreate: number | null;
  redisBytesPerCreate: number | null;
  redisCommandsPerCreateNetOfBeats: number | null;
  redisTopCommandsPerCreate: Record<string, number>;
  redisIdleCommandsPerSec: number | null;
  gatewayCpuMsPer1000Creates: number | null;
  gatewayCpuMsPer1000ListPages: number | null;
  pausedOnDeadNode: number;
  replaceNodeS: number | null;
  replacedElsewhere: number;
  gatewayRssMiB: number | null;
  nodeRssMiB: number | null;
  nodeRssMiBMax: number | null;
  nodeStartS: number | null;
  /** Until the nodes' start-up jobs ended (nodes and gateways under 10 % of a core together). */
  nodesSettledS: number | null;
  nodeRssMiBIdle: number | null;
  nodeCpuMsPerCreate: number | null;
  /**
   * CPU per create over the second half of the creates only: the processes' code is compiled
   * by then (a fresh node's first creates run V8's interpreter and cost 2-3x as much).
   */
  nodeCpuMsPerCreateWarm: number | null;
  /**
   * The nodes' CPU with no sandboxes, per second, all together (beats, samplers): on one host
   * it is charged to the creates; with a node per host it would not be.
   */
  nodesIdleCpuMsPerSec: number | null;
  /** Node CPU per create less what the nodes use idle over the same time. */
  nodeCpuMsPerCreateNetOfIdle: number | null;
  gatewayCpuMsPerCreateWarm: number | null;
}

const out: Out = {
  nodes: NODES,
  sandboxes: SANDBOXES,
  created: 0,
  createFailures: 0,
  createsPerSec: null,
  createP50Ms: null,
  createP99Ms: null,
  listPageP50Ms: null,
  listP99Ms: null,
  listFullWalkP50Ms: null,
  listFullWalkPages: null,
  listFilteredP50Ms: null,
  listFilteredP99Ms: null,
  redisCommandsPerCreate: null,
  redisBytesPerCreate: null,
  redisCommandsPerCreateNetOfBeats: null,
  redisTopCommandsPerCreate: {},
  redisIdleCommandsPerSec: null,
  gatewayCpuMsPer1000Creates: null,
  gatewayCpuMsPer1000ListPages: null,
  pausedOnDeadNode: 0,
  replaceNodeS: null,
  replacedElsewhere: 0,
  gatewayRssMiB: null,
  nodeRssMiB: null,
  nodeRssMiBMax: null,
  nodeStartS: null,
  nodesSettledS: null,
  nodeRssMiBIdle: null,
  nodeCpuMsPerCreate: null,
  nodeCpuMsPerCreateWarm: null,
  nodesIdleCpuMsPerSec: null,
  nodeCpuMsPerCreateNetOfIdle: null,
  gatewayCpuMsPerCreateWarm: null,
};

async function step(name: string, fn: () => Promise<void>): Promise<void> {
  log(name);
  try {
    await fn();
  } catch (e) {
    errors.push(`${name}: ${(e as Error).message}`);
    log(`FAILED ${name}: ${(e as Error).message}`);
  }
}

const gatewayCpu = (c: TestCluster) => c.gateways.reduce((s, g) => s + cpuMs(g.proc.pid), 0);
/** CPU of the nodes still running, summed (a node killed later is not counted before). */
const nodesCpu = (c: TestCluster) => [...c.nodes.values()].reduce((s, n) => s + (cpuMs(n.proc.pid) || 0), 0);
const nodesRss = (c: TestCluster) =>
  [...c.nodes.values()].map((s) => rssMiB(s.proc.pid)).filter((x) => Number.isFinite(x));

async function main(): Promise<void> {
  const cluster = new TestCluster("aes");
  let redis: Redis | undefined;
  try {
    await cluster.start();
    redis = new Redis(cluster.redisUrl, { maxRetriesPerRequest: 5 });
    const perNode = Math.ceil(SANDBOXES / NODES);
    // Room for an even share, the paused ones moved in, and the placement's unevenness.
    const maxSandboxes = Math.max(64, perNode * 2 + PAUSED);
    const nodeEnv = {
      AENV_LOG_LEVEL: "warn",
      AENV_MAX_SANDBOXES: String(maxSandboxes),
      // Admission budgets lifted to the sandbox cap (base: 1 GiB, 2 vCPUs of ceilings each), as
      // an operator running many idle sandboxes would: the default 4× the host's memory stops
      // a node near 94 sandboxes here, which is not what this measures.
      AENV_MAX_MEMORY_MB: String(maxSandboxes * 1024 * 2),
      AENV_MAX_CPUS: String(maxSandboxes * 4),
      AENV_REPOSITORY_CONCURRENCY: "4",
      // The start queue bounds starts by the CPU they take; a simulated start takes none, and
      // the control plane's own cost under load is what this measures.
      AENV_CREATE_CONCURRENCY: "64",
    };
    const t0 = performance.now();
    const ids = Array.from({ length: NODES }, (_, i) => `sim-${String(i).padStart(2, "0")}`);
    for (let i = 0; i < ids.length; i += START_BATCH) {
      await Promise.all(
        ids
          .slice(i, i + START_BATCH)
          .map((id, j) => cluster.startNode(id, nodeEnv, { sim: { slotOctet: OCTET + i + j, latencyScale: LATENCY } })),
      );
      log(`${Math.min(i + START_BATCH, ids.length)} of ${NODES} nodes up`);
    }
    out.nodeStartS = round(ms(t0) / 1000);
    const gws = [await cluster.startGateway(), await cluster.startGateway()];
    // Every node ready in Redis before the clock starts (a node beats within 2 s of its start).
    for (let i = 0; i < 100 && (await redis.scard("aenv:nodes")) < NODES; i++)
      await new Promise((r) => setTimeout(r, 100));

    // The nodes' start-up jobs (committing their templates to the shared repository) end first.
    await untilQuiet([
      ...[...cluster.nodes.values()].map((n) => n.proc.pid),
      ...cluster.gateways.map((g) => g.proc.pid),
    ]);
    out.nodesSettledS = round(ms(t0) / 1000);

    const sandboxIds: string[] = [];
    await step(`background: Redis commands with ${NODES} idle nodes, 5 s`, async () => {
      const a = await redisCounters(redis as Redis);
      const idle0 = nodesCpu(cluster);
      await new Promise((r) => setTimeout(r, 5000));
      const b = await redisCounters(redis as Redis);
      out.redisIdleCommandsPerSec = round(redisDelta(a, b).totalCalls / 5);
      out.nodesIdleCpuMsPerSec = round((nodesCpu(cluster) - idle0) / 5);
      out.nodeRssMiBIdle = round(percentile(nodesRss(cluster), 50));
    });

    await step(`${SANDBOXES} creates through 2 gateways, ${CONCURRENCY} in flight`, async () => {
      const lat: number[] = [];
      const before: RedisCounters = await redisCounters(redis as Redis);
      const cpu0 = gatewayCpu(cluster);
      const nodeCpu0 = nodesCpu(cluster);
      const tStart = performance.now();
      let lastLog = tStart;
      const half = Math.floor(SANDBOXES / 2);
      let mid: { gw: number; node: number; n: number } | undefined;
      await pool(
        Array.from({ length: SANDBOXES }, (_, i) => i),
        CONCURRENCY,
        async (i) => {
          const t = performance.now();
          // The body the e2b SDK's Sandbox.create sends, less what a default leaves out.
          const r = await api(gws[i % 2] as string, "POST", "/sandboxes", {
            templateID: "base",
            timeout: 3600,
            metadata: { bench: "scale", group: String(i % GROUPS) },
          }).catch((e: Error) => ({ status: 0, text: e.message, headers: new Headers() }));
          if (r.status === 201 || r.status === 200) {
            lat.push(ms(t));
            sandboxIds.push((JSON.parse(r.text) as { sandboxID: string }).sandboxID);
            if (sandboxIds.length === half) mid = { gw: gatewayCpu(cluster), node: nodesCpu(cluster), n: half };
          } else {
            out.createFailures++;
            if (out.createFailures <= 5) errors.push(`create ${i}: ${r.status} ${r.text.slice(0, 200)}`);
          }
          if (performance.now() - lastLog > 10_000) {
            lastLog = performance.now();
            log(`${sandboxIds.length} created`);
          }
        },
      );
      const secs = ms(tStart) / 1000;
      const cpu = gatewayCpu(cluster) - cpu0;
      const nodeCpu = nodesCpu(cluster) - nodeCpu0;
      const d = redisDelta(before, await redisCounters(redis as Redis));
      out.created = sandboxIds.length;
      out.createsPerSec = round(sandboxIds.length / secs);
      out.createP50Ms = round(percentile(lat, 50));
      out.createP99Ms = round(percentile(lat, 99));
      const n = Math.max(1, sandboxIds.length);
      out.redisCommandsPerCreate = round(d.totalCalls / n);
      out.redisBytesPerCreate = round((d.bytesIn + d.bytesOut) / n, 0);
      if (out.redisIdleCommandsPerSec !== null) {
        out.redisCommandsPerCreateNetOfBeats = round((d.totalCalls - out.redisIdleCommandsPerSec * secs) / n);
      }
      out.redisTopCommandsPerCreate = Object.fromEntries(
        Object.entries(d.calls)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 8)
          .map(([k, v]) => [k, round(v / n, 2) as number]),
      );
      out.gatewayCpuMsPer1000Creates = round((cpu / n) * 1000, 0);
      out.nodeCpuMsPerCreate = round(nodeCpu / n);
      if (out.nodesIdleCpuMsPerSec !== null) {
        out.nodeCpuMsPerCreateNetOfIdle = round(Math.max(0, nodeCpu - out.nodesIdleCpuMsPerSec * secs) / n);
      }
      if (mid && sandboxIds.length > mid.n) {
        out.nodeCpuMsPerCreateWarm = round((nodesCpu(cluster) - mid.node) / (sandboxIds.length - mid.n));
        out.gatewayCpuMsPerCreateWarm = round((gatewayCpu(cluster) - mid.gw) / (sandboxIds.length - mid.n), 2);
      }
    });

    await step(`list all ${sandboxIds.length} (paginated ×${LIST_N}, filtered ×${LIST_N})`, async () => {
      const pages: number[] = [];
      const walks: number[] = [];
      const filtered: number[] = [];
      let pageCount = 0;
      const cpu0 = gatewayCpu(cluster);
      let requests = 0;
      for (let s = 0; s < LIST_N; s++) {
        const g = gws[s % 2] as string;
        // A full walk only for the first few samples: each is (M / 100) page requests.
        if (s < Math.min(WALKS, LIST_N)) {
          const tw = performance.now();
          let token: string | null = null;
          let seen = 0;
          pageCount = 0;
          do {
            const tp = performance.now();
            const q: string = token ? `&nextToken=${encodeURIComponent(token)}` : "";
            const r = await api(g, "GET", `/v2/sandboxes?limit=100${q}`);
            pages.push(ms(tp));
            requests++;
            pageCount++;
            if (r.status !== 200) throw new Error(`list page: ${r.status} ${r.text.slice(0, 200)}`);
            seen += (JSON.parse(r.text) as unknown[]).length;
            token = r.headers.get("x-next-token");
          } while (token);
          walks.push(ms(tw));
          if (seen < sandboxIds.length) errors.push(`a full list walk saw ${seen} of ${sandboxIds.length}`);
        } else {
          const tp = performance.now();
          const r = await api(g, "GET", "/v2/sandboxes?limit=100");
          pages.push(ms(tp));
          requests++;
          if (r.status !== 200) throw new Error(`list page: ${r.status}`);
        }
        const tf = performance.now();
        const filter = encodeURIComponent(`bench=scale&group=${s % GROUPS}`);
        const r = await api(g, "GET", `/v2/sandboxes?limit=100&state=running&metadata=${filter}`);
        filtered.push(ms(tf));
        requests++;
        if (r.status !== 200) throw new Error(`filtered list: ${r.status} ${r.text.slice(0, 200)}`);
        const items = JSON.parse(r.text) as Array<{ metadata?: Record<string, string> }>;
        if (items.some((it) => it.metadata?.group !== String(s % GROUPS))) errors.push("a filtered list held others");
      }
      out.gatewayCpuMsPer1000ListPages = round(((gatewayCpu(cluster) - cpu0) / requests) * 1000, 0);
      out.listPageP50Ms = round(percentile(pages, 50));
      out.listP99Ms = round(percentile([...pages, ...filtered], 99));
      out.listFullWalkP50Ms = round(percentile(walks, 50));
      out.listFullWalkPages = pageCount;
      out.listFilteredP50Ms = round(percentile(filtered, 50));
      out.listFilteredP99Ms = round(percentile(filtered, 99));
    });

    await step("a node killed -9 with its paused sandboxes: until all resume elsewhere", async () => {
      // The node holding the most sandboxes.
      const owners = await (redis as Redis).mget(sandboxIds.map((id) => `aenv:sbx:${id}`));
      const by = new Map<string, string[]>();
      sandboxIds.forEach((id, i) => {
        const o = owners[i];
        if (o) by.set(o, [...(by.get(o) ?? []), id]);
      });
      const [victim, held] = [...by].sort((a, b) => b[1].length - a[1].length)[0] ?? ["", []];
      const paused = held.slice(0, PAUSED);
      out.pausedOnDeadNode = paused.length;
      await pool(paused, 16, async (id) => {
        const r = await api(gws[0] as string, "POST", `/sandboxes/${id}/pause`);
        if (r.status !== 204) throw new Error(`pause ${id}: ${r.status} ${r.text.slice(0, 200)}`);
      });
      // Committed to the shared repository (within a second in a cluster) before the kill.
      const committed = () => paused.every((id) => existsSync(join(cluster.repo, "manifests", `sbx-${id}.json`)));
      for (let i = 0; i < 600 && !committed(); i++) await new Promise((r) => setTimeout(r, 100));
      if (!committed()) throw new Error("pauses not committed within 60 s");
      const node = cluster.nodes.get(victim);
      if (!node) throw new Error(`no node ${victim}`);
      log(`killing ${victim} with ${paused.length} paused`);
      await node.crash();
      const tk = performance.now();
      const done = new Set<string>();
      const deadline = tk + 120_000;
      await pool(paused, CONCURRENCY, async (id, i) => {
        while (performance.now() < deadline) {
          const r = await api(gws[i % 2] as string, "POST", `/sandboxes/${id}/connect`, { timeout: 3600 }).catch(
            () => ({ status: 0, text: "", headers: new Headers() }),
          );
          if (r.status === 200 || r.status === 201) {
            done.add(id);
            return;
          }
          await new Promise((res) => setTimeout(res, 100));
        }
      });
      out.replaceNodeS = done.size === paused.length ? round(ms(tk) / 1000, 2) : null;
      const moved = await (redis as Redis).mget(paused.map((id) => `aenv:sbx:${id}`));
      out.replacedElsewhere = moved.filter((o) => o && o !== victim).length;
      if (done.size < paused.length) errors.push(`${paused.length - done.size} paused sandboxes not resumed in 120 s`);
      // One of them through the unmodified SDK: it answers a command on its new node.
      if (paused[0]) {
        const s = await Sandbox.connect(paused[0], via(gws[1] as string));
        const r = await s.commands.run("true");
        if (r.exitCode !== 0) errors.push("a moved sandbox did not run `true`");
      }
    });

    const gw = cluster.gateways[0];
    const nodeRss = [...cluster.nodes.values()].map((s) => rssMiB(s.proc.pid)).filter((x) => Number.isFinite(x));
    out.gatewayRssMiB = round(rssMiB(gw?.proc.pid));
    out.nodeRssMiB = round(percentile(nodeRss, 50));
    out.nodeRssMiBMax = round(Math.max(...nodeRss));
  } finally {
    redis?.disconnect();
    log("tearing down");
    await cluster.close();
  }
}

await main().catch((e) => errors.push((e as Error).message));
finishMeta(meta, started);

const f = (v: number | null, unit = "") => (v === null ? "–" : `${v}${unit}`);
const table = [
  `| figure (${out.nodes} sim nodes, 2 gateways, ${out.created} sandboxes) | value | target |`,
  "|:--|--:|--:|",
  `| creates/s through the gateways | ${f(out.createsPerSec)} | ≥ 200 |`,
  `| create p50 / p99 | ${f(out.createP50Ms)} / ${f(out.createP99Ms)} ms | – |`,
  `| list page (limit 100) p50 / p99 of all list requests | ${f(out.listPageP50Ms)} / ${f(out.listP99Ms)} ms | p99 ≤ 1000 ms |`,
  `| list filtered by metadata p50 / p99 | ${f(out.listFilteredP50Ms)} / ${f(out.listFilteredP99Ms)} ms | – |`,
  `| full walk of the list (${f(out.listFullWalkPages)} pages) p50 | ${f(out.listFullWalkP50Ms)} ms | – |`,
  `| Redis commands / bytes per create | ${f(out.redisCommandsPerCreate)} / ${f(out.redisBytesPerCreate)} B | – |`,
  `| Redis commands per create, beats subtracted (${f(out.redisIdleCommandsPerSec)}/s idle) | ${f(out.redisCommandsPerCreateNetOfBeats)} | – |`,
  `| gateway CPU per 1,000 creates / list pages | ${f(out.gatewayCpuMsPer1000Creates)} / ${f(out.gatewayCpuMsPer1000ListPages)} ms | – |`,
  `| ${out.pausedOnDeadNode} paused on a node killed -9: all resumed elsewhere after | ${f(out.replaceNodeS, " s")} | ≤ 10 s |`,
  `| node CPU per create (all nodes): all creates / second half | ${f(out.nodeCpuMsPerCreate)} / ${f(out.nodeCpuMsPerCreateWarm)} ms | ≤ 10 ms |`,
  `| node CPU per create less the nodes' idle CPU (${f(out.nodesIdleCpuMsPerSec)} ms/s idle) | ${f(out.nodeCpuMsPerCreateNetOfIdle)} ms | – |`,
  `| gateway CPU per create (both): second half | ${f(out.gatewayCpuMsPerCreateWarm)} ms | ≤ 2 ms |`,
  `| RSS at the end: a gateway / a node (median, max) | ${f(out.gatewayRssMiB)} / ${f(out.nodeRssMiB)}, ${f(out.nodeRssMiBMax)} MiB | – |`,
  `| RSS of a node before the creates (median) | ${f(out.nodeRssMiBIdle)} MiB | – |`,
  `| nodes started in / settled after | ${f(out.nodeStartS, " s")} / ${f(out.nodesSettledS, " s")} | – |`,
].join("\n");
const loads = `load average ${meta.loadAvgStart.join(" ")} at the start, ${meta.loadAvgEnd?.join(" ")} at the end`;
process.stdout.write(`\n${table}\n\n${loads}\n`);
if (errors.length) process.stdout.write(`\nerrors:\n${errors.map((e) => `- ${e}`).join("\n")}\n`);
mkdirSync(RESULTS, { recursive: true });
writeFileSync(join(RESULTS, "cluster-scale-latest.json"), `${JSON.stringify({ meta, ...out, errors }, null, 2)}\n`);
writeFileSync(
  join(RESULTS, "cluster-scale-latest.md"),
  `# Cluster at scale (sim runtime)\n\n${table}\n\n${meta.date}, commit ${meta.commit}, ${loads}\n${errors.length ? `\nerrors:\n${errors.map((e) => `- ${e}`).join("\n")}\n` : ""}`,
);
process.exit(errors.length ? 1 : 0);
