// aenv-lazyfs (Go, static): the FUSE server of image trees whose content arrives on demand
// (native/lazyfs; see templates/lazy-trees.ts). Built with Debian's go-fuse and x/sys
// (scripts/install-deps.sh), GOPROXY=off: nothing is downloaded.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, "..", "dist", "native", "aenv-lazyfs");
mkdirSync(path.dirname(out), { recursive: true });
let goFound = true;
try {
  execFileSync("go", ["version"], { stdio: "ignore" });
} catch {
  goFound = false;
}
if (goFound) {
  execFileSync("go", ["build", "-trimpath", "-ldflags=-s -w", "-o", out, "."], {
    cwd: path.join(here, "lazyfs"),
    stdio: "inherit",
    env: { ...process.env, CGO_ENABLED: "0", GOPROXY: "off", GOFLAGS: "-mod=mod" },
  });
  console.log(`built ${path.relative(process.cwd(), out)}`);
} else {
  rmSync(out, { force: true });
  console.warn("go not found: aenv-lazyfs is not built (images start only after a whole pull)");
}
