// Bundle src/main.ts into dist/envd.js (CommonJS, node20); node-pty stays external and is
// shipped next to the bundle as node_modules/node-pty.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, "dist");
mkdirSync(path.join(dist, "lib"), { recursive: true });

await build({
  entryPoints: [path.join(here, "src", "main.ts")],
  outfile: path.join(dist, "envd.js"),
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: ["node-pty"],
  sourcemap: false,
  legalComments: "none",
  // V8 keeps the whole source as one string in every envd (and so in every image): one
  // non-ASCII character left in a comment made it a two-byte string (1 MiB for a 0.5 MB
  // bundle). Without comments and whitespace, in ASCII: ~0.35 MB, one byte per character.
  // Identifiers keep their names (stack traces in envd's log stay readable).
  charset: "ascii",
  minifyWhitespace: true,
  minifySyntax: true,
  logLevel: "warning",
  banner: { js: "/* aenv envd */" },
});

// dist/envd.js is CommonJS although this package is "type": "module"; dist/lib (tsc output) is ESM.
writeFileSync(path.join(dist, "package.json"), `${JSON.stringify({ type: "commonjs" })}\n`);
writeFileSync(path.join(dist, "lib", "package.json"), `${JSON.stringify({ type: "module" })}\n`);
console.log(`built ${path.relative(process.cwd(), path.join(dist, "envd.js"))}`);

// The sandbox's PID 1: a static C reaper that starts envd (see init/aenv-init.c).
execFileSync("cc", ["-static", "-O2", "-Wall", "-o", path.join(dist, "aenv-init"), path.join(here, "init", "aenv-init.c")], {
  stdio: "inherit",
});
console.log(`built ${path.relative(process.cwd(), path.join(dist, "aenv-init"))}`);

// sudo/su (a static client of envd's root service) and xattr access for file metadata.
for (const tool of ["aenv-sudo", "aenv-xattr"]) {
  execFileSync("cc", ["-static", "-O2", "-Wall", "-o", path.join(dist, tool), path.join(here, "init", `${tool}.c`)], {
    stdio: "inherit",
  });
  console.log(`built ${path.relative(process.cwd(), path.join(dist, tool))}`);
}

// malloc_trim for envd (a Node-API module): needs node's headers, which Node's packages ship
// next to the binary. Without them envd goes without (its images are then larger).
const nodeInclude = [path.resolve(path.dirname(process.execPath), "..", "include", "node"), "/usr/include/node"].find(
  (d) => existsSync(path.join(d, "node_api.h")),
);
const trimOut = path.join(dist, "aenv-trim.node");
if (nodeInclude) {
  execFileSync("cc", ["-shared", "-fPIC", "-O2", "-Wall", `-I${nodeInclude}`, "-o", trimOut, path.join(here, "init", "aenv-trim.c")], {
    stdio: "inherit",
  });
  console.log(`built ${path.relative(process.cwd(), trimOut)}`);
} else {
  rmSync(trimOut, { force: true });
  console.warn("node_api.h not found: envd is built without aenv-trim.node (no malloc_trim at quiesce)");
}

// The native envd (Go, static): what sandboxes run with `runtime.envd = native`. Built where Go
// is installed (scripts/install-deps.sh installs it and Debian's golang-google-protobuf-dev,
// which native/go.mod replaces the module with: GOPROXY=off, nothing is downloaded).
const nativeOut = path.join(dist, "envd-native");
let goFound = true;
try {
  execFileSync("go", ["version"], { stdio: "ignore" });
} catch {
  goFound = false;
}
if (goFound) {
  execFileSync("go", ["build", "-trimpath", "-ldflags=-s -w", "-o", nativeOut, "."], {
    cwd: path.join(here, "native"),
    stdio: "inherit",
    env: { ...process.env, CGO_ENABLED: "0", GOPROXY: "off", GOFLAGS: "-mod=mod" },
  });
  console.log(`built ${path.relative(process.cwd(), nativeOut)}`);
} else {
  rmSync(nativeOut, { force: true });
  console.warn("go not found: the native envd is not built (runtime.envd = native unavailable)");
}
