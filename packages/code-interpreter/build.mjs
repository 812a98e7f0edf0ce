// Bundles the service (and the JavaScript context's runner) into dist/: one CommonJS file
// each, for the Node that Debian bookworm ships inside the template (18), no node_modules.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));
for (const [entry, out] of [
  ["main.ts", "server.cjs"],
  ["kernels/js-runner.ts", "js-runner.cjs"],
]) {
  await build({
    entryPoints: [path.join(here, "src", entry)],
    outfile: path.join(here, "dist", out),
    bundle: true,
    platform: "node",
    format: "cjs",
    target: "node18",
    // ws's optional native helpers are not installed: it falls back to JavaScript.
    external: ["bufferutil", "utf-8-validate"],
    // Python the service sends to its kernels (kernels/charts.py) is kept in .py files.
    loader: { ".py": "text" },
    charset: "ascii",
    legalComments: "none",
    logLevel: "warning",
  });
  console.log(`built ${path.relative(process.cwd(), path.join(here, "dist", out))}`);
}
