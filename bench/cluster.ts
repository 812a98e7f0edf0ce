/**
 * Cluster benchmark: what the gateway costs per call (create → first command, and a warm
 * `commands.run('true')`) against the same node called directly; creates per second through
 * the gateway with one, two and three nodes (all on this host, so they share its cores); and resuming a paused sandbox on a different node (its
 * image fetched from the shared repository) against resuming it on its own node.
 *
 *   node --import tsx bench/cluster.ts        (part of `npm run bench`)
 *
 * Env: BENCH_N (samples per latency figure, default 10), BENCH_BURST (concurrent creates, 8),
 * BENCH_CLUSTER_NODES (the most nodes the burst is measured with, 2 or 3, default 3: the last
 * step moves a sandbox to another node).
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { API_KEY, TestCluster, via } from "../test/helpers/cluster.js";
import { RESULTS } from "./paths.js";
import { summarize } from "./stats.js";

const N = Math.max(1, Number(process.env.BENCH_N ?? 10));
const BURST = Math.max(1, Number(process.env.BENCH_BURST ?? 8));
const NODES = Math.min(3, Math.max(2, Number(process.env.BENCH_CLUSTER_NODES ?? 3)));

interface Row {
  metric: string;
  gateway: number | null;
  direct: number | null;
  unit: string;
}
const rows: Row[] = [];
const errors: string[] = [];
const log = (m: string) => process.stderr.write(`[bench cluster] ${m}\n`);

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

async function createToFirstCommand(url: string): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < N + 1; i++) {
    let s: Sandbox | undefined;
    const ms = await time(async () => {
      s = await Sandbox.create(via(url));
      await s.commands.run("true");
    });
    await s?.kill();
    if (i > 0) out.push(ms); // the first is a warm-up
  }
  return out;
}

async function roundTrips(url: string, id: string): Promise<number[]> {
  const s = await Sandbox.connect(id, via(url));
  await s.commands.run("true");
  const out: number[] = [];
  for (let i = 0; i < N * 3; i++) out.push(await time(() => s.commands.run("true")));
  return out;
}

async function burst(url: string): Promise<number> {
  const t = performance.now();
  const made = await Promise.allSettled(Array.from({ length: BURST }, () => Sandbox.create(via(url))));
  const secs = (performance.now() - t) / 1000;
  const ok = made.filter((r): r is PromiseFulfilledResult<Sandbox> => r.status === "fulfilled").map((r) => r.value);
  await Promise.all(ok.map((s) => s.kill()));
  return ok.length / secs;
}

async function main(): Promise<void> {
  const cluster = new TestCluster("aeq");
  try {
    await cluster.start();
    const a = await cluster.startNode("node-a", { AENV_LOG_LEVEL: "warn" });
    const gw = await cluster.startGateway();
    const step = async (name: string, fn: () => Promise<void>) => {
      log(name);
      try {
        await fn();
      } catch (e) {
        errors.push(`${name}: ${(e as Error).message}`);
        log(`FAILED ${name}: ${(e as Error).message}`);
      }
    };
    await step(`create → first command ×${N}`, async () => {
      const g = summarize(await createToFirstCommand(gw));
      const d = summarize(await createToFirstCommand(a.url));
      rows.push({ metric: "create → first command, p50", gateway: g.p50, direct: d.p50, unit: "ms" });
      rows.push({ metric: "create → first command, p95", gateway: g.p95, direct: d.p95, unit: "ms" });
    });
    await step(`commands.run('true') ×${N * 3}`, async () => {
      const s = await Sandbox.create(via(gw));
      try {
        const g = summarize(await roundTrips(gw, s.sandboxId));
        const d = summarize(await roundTrips(a.url, s.sandboxId));
        rows.push({ metric: "commands.run('true'), p50", gateway: g.p50, direct: d.p50, unit: "ms" });
        rows.push({ metric: "commands.run('true'), p95", gateway: g.p95, direct: d.p95, unit: "ms" });
      } finally {
        await s.kill();
      }
    });
    await step(`creates/s, burst of ${BURST}, 1 node`, async () => {
      rows.push({
        metric: `creates/s through the gateway, ${BURST} at once, 1 node`,
        gateway: await burst(gw),
        direct: null,
        unit: "/s",
      });
    });
    for (const [n, id] of [
      [2, "node-b"],
      [3, "node-c"],
    ] as const) {
      if (n > NODES) break;
      await cluster.startNode(id, { AENV_LOG_LEVEL: "warn" });
      await step(`creates/s, burst of ${BURST}, ${n} nodes`, async () => {
        rows.push({
          metric: `creates/s through the gateway, ${BURST} at once, ${n} nodes`,
          gateway: await burst(gw),
          direct: null,
          unit: "/s",
        });
      });
    }
    await step("resume on its own node vs on another node", async () => {
      const s = await Sandbox.create(via(gw));
      await s.commands.run("head -c 10000000 /dev/urandom > /tmp/ten-mb");
      await s.pause();
      const own = await time(async () => {
        const c = await Sandbox.connect(s.sandboxId, via(gw));
        await c.commands.run("true");
      });
      await s.pause();
      // Committed to the shared repository, then its node goes: the next connect moves it.
      const home = await cluster.ownerOf(s.sandboxId);
      const file = join(cluster.repo, "manifests", `sbx-${s.sandboxId}.json`);
      for (let i = 0; i < 300 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
      await cluster.nodes.get(home)?.crash();
      const moved = await time(async () => {
        const c = await Sandbox.connect(s.sandboxId, via(gw));
        await c.commands.run("true");
      });
      rows.push({
        metric: "resume → first command (10 MiB written), on its own node",
        gateway: own,
        direct: null,
        unit: "ms",
      });
      rows.push({
        metric: "resume → first command (10 MiB written), on another node",
        gateway: moved,
        direct: null,
        unit: "ms",
      });
      await fetch(`${gw}/sandboxes/${s.sandboxId}`, { method: "DELETE", headers: { "x-api-key": API_KEY } });
    });
  } finally {
    await cluster.close();
  }
}

await main().catch((e) => errors.push((e as Error).message));
const fmt = (v: number | null) => (v === null ? "–" : v.toFixed(v < 10 ? 2 : 0));
const table = [
  "| metric | through the gateway | node directly | unit |",
  "|:--|--:|--:|:--|",
  ...rows.map((r) => `| ${r.metric} | ${fmt(r.gateway)} | ${fmt(r.direct)} | ${r.unit} |`),
].join("\n");
process.stdout.write(`\n${table}\n`);
if (errors.length) process.stdout.write(`\nerrors:\n${errors.map((e) => `- ${e}`).join("\n")}\n`);
mkdirSync(RESULTS, { recursive: true });
writeFileSync(
  join(RESULTS, "cluster.json"),
  `${JSON.stringify({ date: new Date().toISOString(), n: N, burst: BURST, rows, errors }, null, 2)}\n`,
);
process.exit(errors.length ? 1 : 0);
