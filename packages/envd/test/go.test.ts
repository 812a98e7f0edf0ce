/**
 * envd's Go unit tests (go test ./..., every package's) beside the SDK-driven suites. Go's own
 * test cache is kept: a package whose code, inputs and environment did not change is not run
 * again (a fresh checkout or a change runs it).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, it } from "node:test";

const hasGo = spawnSync("go", ["version"], { stdio: "ignore" }).status === 0;

describe("envd (Go)", { skip: !hasGo && "go is not installed" }, () => {
  it("go test", () => {
    const r = spawnSync("go", ["test", "./..."], {
      cwd: path.join(import.meta.dirname, "..", "native"),
      env: { ...process.env, CGO_ENABLED: "0", GOPROXY: "off", GOFLAGS: "-mod=mod" },
      encoding: "utf8",
      timeout: 300_000,
    });
    assert.equal(r.status, 0, `go test:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /^ok\s/m);
  });
});
