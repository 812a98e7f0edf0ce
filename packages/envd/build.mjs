// envd (Go, static) and the static C tools shipped beside it in every sandbox's runtime
// folder; tsc builds dist/lib (the host-side helper that says where they are).
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { goBuild } from "../../scripts/lib/go-build.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, "dist");
mkdirSync(path.join(dist, "lib"), { recursive: true });
writeFileSync(path.join(dist, "lib", "package.json"), `${JSON.stringify({ type: "module" })}\n`);

// The sandbox's PID 1: a static C reaper that starts envd (see init/aenv-init.c); sudo/su (a
// static client of envd's root service); aenv-xattr (get/set of `user.e2b.*` xattrs from a
// shell; envd itself makes the system calls).
for (const tool of ["aenv-init", "aenv-sudo", "aenv-xattr"]) {
  execFileSync("cc", ["-static", "-O2", "-Wall", "-o", path.join(dist, tool), path.join(here, "init", `${tool}.c`)], {
    stdio: "inherit",
  });
  console.log(`built ${path.relative(process.cwd(), path.join(dist, tool))}`);
}

// envd itself (native/cmd/envd), with Debian's golang-google-protobuf-dev. The file keeps its
// name: it is part of the runtime folder's ID.
goBuild({
  moduleDir: path.join(here, "native"),
  pkg: "./cmd/envd",
  out: path.join(dist, "envd-native"),
  missing: "envd is not built (sandboxes cannot start until it is)",
});
