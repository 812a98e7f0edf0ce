// One static Go binary built offline, as every Go program of the project is: CGO off,
// GOPROXY=off (the modules' dependencies are Debian's packages, which their go.mod replace
// the modules with; scripts/install-deps.sh installs them and Go). Where Go is missing the
// output is removed and `missing` explains what that means; the build of the rest goes on.
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import path from "node:path";

function haveGo() {
  try {
    execFileSync("go", ["version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** Builds package `pkg` of the module in `moduleDir` into `out`. */
export function goBuild({ moduleDir, pkg = ".", out, missing }) {
  mkdirSync(path.dirname(out), { recursive: true });
  if (!haveGo()) {
    rmSync(out, { force: true });
    console.warn(`go not found: ${missing}`);
    return false;
  }
  execFileSync("go", ["build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg], {
    cwd: moduleDir,
    stdio: "inherit",
    env: { ...process.env, CGO_ENABLED: "0", GOPROXY: "off", GOFLAGS: "-mod=mod" },
  });
  console.log(`built ${path.relative(process.cwd(), out)}`);
  return true;
}
