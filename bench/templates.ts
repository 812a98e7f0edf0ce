/**
 * Template start benchmark: a sandbox from a built template (warm: a restore of its snapshot,
 * the start command already serving) vs a cold start from the same image (POST
 * /sandboxes-cold: boot the unpacked tree, start the command, wait until it serves), and the
 * first cold start of an image (pull + unpack + boot). All to the first HTTP answer.
 *
 *   node --import tsx bench/templates.ts        (part of `npm run bench`)
 *
 * Env: BENCH_REPS (default 3).
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { Sandbox, Template } from "e2b";
import { push, startRegistry } from "../packages/server/test/helpers/registry.js";
import { tinyImage } from "../test/helpers/images.js";
import { getViaHost, startServer, TEMPLATES_DIR, type TestServer, useE2b } from "../test/helpers/server.js";
import { mean } from "./stats.js";

const REPS = Number(process.env.BENCH_REPS ?? 3);
const RESULTS = join(import.meta.dirname, "results");
const START = "httpd -f -p 8080 -h /www";

async function untilServes(server: TestServer, id: string): Promise<void> {
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; ) {
    const r = await getViaHost(server, `8080-${id}.${server.domain}`, "/index.html").catch(() => ({ status: 0 }));
    if (r.status === 200) return;
    await new Promise((res) => setTimeout(res, 20));
  }
  throw new Error(`sandbox ${id} did not serve within 60 s`);
}

async function timed(server: TestServer, create: () => Promise<string>): Promise<number> {
  const t0 = performance.now();
  const id = await create();
  await untilServes(server, id);
  const ms = performance.now() - t0;
  await server.api("DELETE", `/sandboxes/${id}`);
  return ms;
}

async function main(): Promise<void> {
  const work = mkdtempSync("/var/tmp/aenv-bench-tpl-");
  const registry = await startRegistry();
  const templatesDir = join(work, "templates");
  mkdirSync(templatesDir);
  mkdirSync(join(TEMPLATES_DIR, ".warm"), { recursive: true });
  symlinkSync(join(TEMPLATES_DIR, ".warm"), join(templatesDir, ".warm"));
  tinyImage(join(work, "tiny"));
  await push(join(work, "tiny"), "1", registry.host, "tiny");
  const image = `${registry.host}/tiny:1`;
  const server = await startServer({
    templatesDir,
    // Warm start here means a restore of the template's warm image, not a pooled sandbox.
    // The registry is on loopback (AENV_ALLOW_PRIVATE_REGISTRIES, an operator's setting).
    env: {
      AENV_NET_PREFIX: "aeb",
      AENV_SLOT_CIDR: "10.203.0.0/16",
      AENV_WARM_POOL_MAX: "0",
      AENV_ALLOW_PRIVATE_REGISTRIES: "1",
    },
  });
  useE2b(server);
  const rows: Array<{ case: string; ms: number[]; mean: number }> = [];
  const row = (c: string, ms: number[]) => rows.push({ case: c, ms, mean: mean(ms) });
  try {
    const coldStart = async () => {
      const r = await server.api("POST", "/sandboxes-cold", { image });
      if (r.status !== 201) throw new Error(JSON.stringify(r.body));
      const id = (r.body as { sandboxID: string }).sandboxID;
      // An image has no start command of its own: start the same server by hand.
      const s = await Sandbox.connect(id);
      await s.commands.run(START, { background: true, timeoutMs: 0 });
      return id;
    };
    row("cold start, first (pull + unpack + boot) → serving", [await timed(server, coldStart)]);
    const t0 = performance.now();
    await Template.build(
      Template().fromImage(image).setStartCmd(START, "wget -q -O /dev/null http://127.0.0.1:8080/index.html"),
      "bench-web",
    );
    row("template build (layers cached) incl. warm snapshot", [performance.now() - t0]);
    const warm: number[] = [];
    const cold: number[] = [];
    for (let i = 0; i < REPS; i++) {
      warm.push(
        await timed(server, async () => {
          const r = await server.api("POST", "/sandboxes", { templateID: "bench-web" });
          return (r.body as { sandboxID: string }).sandboxID;
        }),
      );
      cold.push(await timed(server, coldStart));
    }
    row("warm start from the built template → serving", warm);
    row("cold start from the image (tree cached) → serving", cold);
  } finally {
    await server.api("DELETE", "/templates/bench-web").catch(() => {});
    await server.stop();
    await registry.stop();
    rmSync(work, { recursive: true, force: true });
    rmSync(server.dataDir, { recursive: true, force: true });
  }
  const meta = { date: new Date().toISOString(), cpus: cpus().length, loadAvg: loadavg(), reps: REPS };
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, "templates.json"), JSON.stringify({ meta, rows }, null, 2));
  console.log("\n| case | mean ms | samples |\n|---|---:|---|");
  for (const r of rows)
    console.log(`| ${r.case} | ${r.mean.toFixed(0)} | ${r.ms.map((x) => x.toFixed(0)).join(", ")} |`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
