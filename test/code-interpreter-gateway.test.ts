// The unmodified @e2b/code-interpreter SDK through a cluster gateway: a node on Redis behind an
// aenv-gateway, the SDK given only the gateway's address. The gateway routes the service's
// port 49999 (the E2b-Sandbox-Port header form) as it routes envd's, streamed bodies included.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Sandbox } from "@e2b/code-interpreter";
import { TestCluster, via } from "./helpers/cluster.js";
import { TEST_REPOSITORY_KEY } from "./helpers/repository.js";
import { startServer, TEMPLATES_DIR } from "./helpers/server.js";

// Its one node is started here, on the test's own network (the cluster names none).
const cluster = new TestCluster();
let gateway = "";
let templatesDir = "";

before(async () => {
  await cluster.start();
  // The node links the shared templates and their warm images (the code interpreter's tree is
  // gigabytes, its warm image a minute and a half to capture) and commits nothing.
  templatesDir = mkdtempSync("/var/tmp/aenv-ci-gw-tpl-");
  mkdirSync(join(TEMPLATES_DIR, ".warm"), { recursive: true });
  for (const name of ["base", "code-interpreter-v1", ".warm"]) {
    symlinkSync(join(TEMPLATES_DIR, name), join(templatesDir, name));
  }
  const node = await startServer({
    templatesDir,
    env: {
      AENV_CLUSTER: cluster.redisUrl,
      AENV_NODE_ID: "ci-node",
      AENV_REPOSITORY_PATH: cluster.repo,
      AENV_REPOSITORY_KEY: TEST_REPOSITORY_KEY,
      AENV_COMMIT_TEMPLATES: "false",
      AENV_GC_INTERVAL: "0",
    },
  });
  cluster.nodes.set("ci-node", node);
  gateway = await cluster.startGateway();
});

after(async () => {
  await cluster.close();
  if (templatesDir) rmSync(templatesDir, { recursive: true, force: true });
});

test("through a gateway: the default template, stateful cells, streamed output, a figure, a context, pause and resume", async () => {
  const opts = { ...via(gateway), timeoutMs: 300_000 };
  const sbx = await Sandbox.create(opts);
  try {
    assert.equal(await cluster.ownerOf(sbx.sandboxId), "ci-node");
    await sbx.runCode("x = 41");
    assert.equal((await sbx.runCode("x + 1")).text, "42");
    const out: string[] = [];
    const streamed = await sbx.runCode(
      "import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.2)",
      {
        onStdout: (m) => {
          out.push(m.line);
        },
      },
    );
    // As the kernel flushes it: a timed flush may fall inside a print, splitting its line.
    assert.equal(out.join(""), "line 0\nline 1\nline 2\n");
    assert.ok(out.length >= 3, JSON.stringify(out));
    assert.deepEqual(streamed.logs.stdout, out);
    const fig = await sbx.runCode(
      "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('via gateway')\nplt.show()",
    );
    const png = fig.results.find((r) => r.png)?.png ?? "";
    assert.equal(Buffer.from(png, "base64").subarray(1, 4).toString(), "PNG");
    const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
    assert.equal((await sbx.runCode("import os; os.getcwd()", { context: ctx })).text, "'/tmp'");
    // The gateway passes on what the node's proxy checks: without the sandbox's access token
    // the service runs nothing (401), and the traffic token alone is no key to /execute.
    const callers: Array<Record<string, string>> = [
      {},
      { "e2b-traffic-access-token": sbx.trafficAccessToken as string },
    ];
    for (const headers of callers) {
      const r = await fetch(`${gateway}/execute`, {
        method: "POST",
        headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "49999", ...headers },
        body: JSON.stringify({ code: "x = 0" }),
      });
      assert.equal(r.status, 401, await r.text());
    }
    const err = await sbx.runCode("1 / 0");
    assert.equal(err.error?.name, "ZeroDivisionError");
    assert.equal(await sbx.pause(), true);
    const again = await Sandbox.connect(sbx.sandboxId, opts);
    assert.equal((await again.runCode("x + 1")).text, "42", "the kernel's state came back");
  } finally {
    await sbx.kill().catch(() => false);
  }
});
