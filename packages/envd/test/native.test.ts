/**
 * The native (Go) envd against the same SDK-driven suites as the Node envd: each suite runs
 * in a child test process with AENV_TEST_ENVD=native (helpers.ts then starts dist/envd-native).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { NATIVE_ENVD, needsRoot } from "./helpers.js";

const SUITES = ["codecs.test.ts", "commands.test.ts", "files.test.ts", "native-routes.test.ts", "native-sudo.test.ts"];

describe("native envd", {
  skip: needsRoot || (!existsSync(NATIVE_ENVD) && "the native envd is not built (no Go)"),
}, () => {
  // The Go unit tests (sudo options, filesystem layers) beside the SDK-driven suites.
  it("go test", () => {
    const r = spawnSync("go", ["test", "-count=1", "./..."], {
      cwd: path.join(import.meta.dirname, "..", "native"),
      env: { ...process.env, CGO_ENABLED: "0", GOPROXY: "off", GOFLAGS: "-mod=mod" },
      encoding: "utf8",
      timeout: 300_000,
    });
    assert.equal(r.status, 0, `go test:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /^ok\s/m);
  });

  for (const suite of SUITES) {
    it(suite, () => {
      // NODE_TEST_CONTEXT (set by the runner in this file's process) would make the nested
      // runner report to us instead of running its tests.
      const { NODE_TEST_CONTEXT: _, ...env } = process.env;
      const r = spawnSync(
        process.execPath,
        ["--import", "tsx", "--test", "--test-reporter=spec", path.join(import.meta.dirname, suite)],
        { env: { ...env, AENV_TEST_ENVD: "native" }, encoding: "utf8", timeout: 300_000 },
      );
      const out = `${suite} against the native envd:\n${r.stdout}\n${r.stderr}`;
      assert.equal(r.status, 0, out);
      assert.match(r.stdout, /ℹ pass [1-9]/, out);
      assert.match(r.stdout, /ℹ fail 0/, out);
    });
  }
});
