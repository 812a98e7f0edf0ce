// The gateway's command line: a Redis target it cannot use stops it at once with exit 2 and
// the reason, rather than a gateway retrying forever against a typo.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, test } from "node:test";

describe("gateway flags", () => {
  // The gateway as built (scripts/test-unit.sh builds first).
  const gateway = join(import.meta.dirname, "../bin/aenv-gateway.js");
  const run = (args: string[], extra: Record<string, string> = {}) =>
    spawnSync(process.execPath, [gateway, ...args], {
      env: { PATH: process.env.PATH ?? "", AENV_API_KEY: "k", ...extra },
      encoding: "utf8",
      timeout: 20_000,
    });

  test("sentinels without a master name stop it with exit 2 and the reason", () => {
    const r = run(["--listen", "127.0.0.1:0", "--cluster-sentinels", "127.0.0.1:1"]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /aenv-gateway: --cluster-sentinels needs --cluster-master/);
  });

  test("a URL and sentinels together are refused", () => {
    const r = run(["--cluster", "redis://127.0.0.1:1"], {
      AENV_CLUSTER_SENTINELS: "127.0.0.1:2",
      AENV_CLUSTER_MASTER: "m",
    });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /both set: give one/);
  });

  test("neither is refused", () => {
    const r = run([]);
    assert.equal(r.status, 2);
    assert.match(r.stderr, /--cluster-sentinels with --cluster-master/);
  });
});
