/**
 * `npm run bench`: every benchmark, one after another, each in its own process. One that fails
 * does not stop the others; the failures are listed at the end and the exit code is non-zero.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";

const BENCHMARKS = [
  "run.ts",
  "lifecycle.ts",
  "templates.ts",
  "snapshots.ts",
  "pull.ts",
  "repository.ts",
  "cluster.ts",
  "cluster-scale.ts",
  "rollouts.ts",
  "code-interpreter.ts",
  "density.ts",
  "desktop.ts",
  "tti.ts",
  "images.ts",
];

function runOne(file: string): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, file)], { stdio: "inherit" });
    child.on("error", () => resolve(127));
    child.on("exit", (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

const only = process.argv.slice(2);
const failed: string[] = [];
for (const file of BENCHMARKS) {
  if (only.length && !only.some((o) => file.startsWith(o))) continue;
  process.stderr.write(`\n[bench] ${file}\n`);
  const t0 = Date.now();
  const code = await runOne(file);
  process.stderr.write(`[bench] ${file}: exit ${code} after ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
  if (code !== 0) failed.push(`${file} (exit ${code})`);
}
if (failed.length) {
  process.stderr.write(`\n[bench] FAILED: ${failed.join(", ")}\n`);
  process.exit(1);
}
process.stderr.write("\n[bench] every benchmark ran\n");
