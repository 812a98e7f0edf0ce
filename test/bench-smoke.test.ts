// `npm run bench` runs end to end on the machine the suite runs on (the `base` template as
// setup made it), with tiny settings: each benchmark here exits 0 and the raw runsc column is
// filled. Figures are not judged here; that is what the benchmarks are for. The suite has a
// 20-minute budget on two cores, so the smoke takes the benchmarks whose figures the docs lead
// with (run, lifecycle, templates, snapshots, repository, and tti, the public one); the rest
// (pull, cluster, cluster-scale, code-interpreter, rollouts, density, desktop, images: each
// with a registry, a cluster or a template of its own, 15-120 s each even when tiny) are left
// to `npm run bench`, and what they drive has tests of its own.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ROOT } from "./helpers/server.js";

const SMOKED = ["run", "lifecycle", "templates", "snapshots", "repository", "tti"];

const TINY = {
  BENCH_N: "1",
  BENCH_RT_N: "2",
  BENCH_RAW_RT_N: "2",
  BENCH_FILE_MIB: "1",
  BENCH_FILE_REPS: "1",
  BENCH_MEM_K: "1",
  BENCH_MEM_SETTLE_MS: "500",
  BENCH_DIRTY_MB: "1",
  BENCH_FORKS: "1",
  BENCH_REPS: "1",
  BENCH_SNAPSHOT_MB: "4",
  BENCH_REPO_MB: "4",
  BENCH_INC_MB: "4",
  BENCH_BURST: "2",
  BENCH_CLUSTER_NODES: "2",
  // rollouts.ts: 20 s budgets (a setup-per-rollout pass takes ~7 s, 2-3x that under load); a
  // 40-file task. density.ts: one idle sandbox per pass, 1 s windows.
  BENCH_SMOKE: "1",
};

test("the benchmarks run once with tiny settings, raw column included", async () => {
  const out = mkdtempSync("/var/tmp/aenv-bench-smoke-");
  try {
    let log = "";
    const code = await new Promise<number>((resolve) => {
      const p = spawn(process.execPath, ["--import", "tsx", join(ROOT, "bench/all.ts"), ...SMOKED], {
        cwd: ROOT,
        env: { ...process.env, ...TINY, BENCH_RESULTS_DIR: out },
        stdio: ["ignore", "pipe", "pipe"],
      });
      p.stdout.on("data", (d: Buffer) => (log += d.toString()));
      p.stderr.on("data", (d: Buffer) => (log += d.toString()));
      p.on("exit", (c) => resolve(c ?? 1));
    });
    // What each took, in the suite's output: the smoke's share of the suite's time.
    for (const line of log.match(/^\[bench\] \S+: exit \d+ after \d+ s$/gm) ?? []) console.log(line);
    // A failed benchmark's own output (from its header to its exit line), then the log's end.
    const failed = /\[bench\] FAILED: (.*)/.exec(log)?.[1]?.split(", ") ?? [];
    const own = failed.map((f) => {
      const start = log.indexOf(`[bench] ${f}\n`);
      const end = log.indexOf(`[bench] ${f}: exit`, start);
      return start < 0 ? "" : log.slice(Math.max(start, end - 6000), end + 200);
    });
    assert.equal(code, 0, [...own, log.slice(-4000)].join("\n…\n"));
    assert.match(log, /every benchmark ran/);
    for (const name of SMOKED) assert.match(log, new RegExp(`\\[bench\\] ${name}\\.ts: exit 0`));
    const main = JSON.parse(readFileSync(join(out, "latest.json"), "utf8")) as Record<string, unknown>;
    assert.deepEqual(main.errors, []);
    for (const k of ["createToFirstCommand", "commandRoundTrip", "idleMemory", "fileWrite", "fileRead"]) {
      const row = main[k] as { raw?: unknown } | undefined;
      assert.ok(row?.raw, `${k}: raw runsc figure missing`);
    }
    const life = JSON.parse(readFileSync(join(out, "lifecycle-latest.json"), "utf8")) as {
      rows: Array<{ raw: number | null }>;
      errors: string[];
    };
    // With the bench's output (a failed case prints the server's log tail), to see why.
    assert.deepEqual(life.errors, [], log.slice(-8000));
    assert.ok(life.rows.length > 0 && life.rows.every((r) => typeof r.raw === "number"), "lifecycle raw column");
    const tti = JSON.parse(readFileSync(join(out, "tti-latest.json"), "utf8")) as {
      modes: Array<{ mode: string; ok: number; n: number }>;
    };
    for (const m of tti.modes) assert.ok(m.ok > 0, `tti ${m.mode}: ${m.ok} of ${m.n} served`);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
