// The unmodified @e2b/code-interpreter SDK (2.8.0) against a real server: the default
// template `code-interpreter-v1`, whose warm image has the service on port 49999 and a Python
// kernel running, in real runsc sandboxes.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  type BarChart,
  type LineChart,
  NotFoundError,
  type PieChart,
  Sandbox,
  SandboxError,
  type ScatterChart,
  Template,
  TimeoutError,
} from "@e2b/code-interpreter";
import { envdHostToken } from "../packages/server/src/orchestrator/envd-credentials.js";
import { cleanupDataDir, startServer, TEMPLATES_DIR, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
let sbx: Sandbox;

before(async () => {
  server = await startServer();
  useE2b(server);
  sbx = await Sandbox.create({ envs: { SANDBOX_WIDE: "from-create" }, timeoutMs: 600_000 });
});

after(async () => {
  await sbx?.kill().catch(() => {});
  await server?.stop();
  if (server) cleanupDataDir(server);
});

/** A sandbox's envd access token (the SDK keeps it protected). */
const tokenOf = (s: Sandbox): string => (s as unknown as { envdAccessToken: string }).envdAccessToken;

/**
 * A raw call to the service through the proxy, as the SDK routes it: with the sandbox's access
 * token unless `headers` says otherwise.
 */
function service(
  path: string,
  init: { method?: string; body?: string; headers?: Record<string, string>; to?: Sandbox } = {},
): Promise<Response> {
  const to = init.to ?? sbx;
  return fetch(`${server.url}${path}`, {
    method: init.method ?? "POST",
    headers: {
      "content-type": "application/json",
      "e2b-sandbox-id": to.sandboxId,
      "e2b-sandbox-port": "49999",
      ...(init.headers ?? { "x-access-token": tokenOf(to) }),
    },
    ...(init.body !== undefined ? { body: init.body } : {}),
  });
}

describe("cells", () => {
  test("the default template runs Python and keeps state between cells", async () => {
    assert.equal((await sbx.getInfo()).templateId, "code-interpreter-v1");
    const first = await sbx.runCode("x = 41\nprint('hello')");
    assert.deepEqual(first.logs.stdout, ["hello\n"]);
    assert.equal(first.error, undefined);
    const second = await sbx.runCode("x + 1");
    assert.equal(second.text, "42");
    assert.ok(second.executionCount !== undefined && second.executionCount >= 2);
  });

  test("the alias `code-interpreter` starts code-interpreter-v1 and is listed with it", async () => {
    const byAlias = await Sandbox.create("code-interpreter");
    try {
      assert.equal((await byAlias.runCode("1+1")).text, "2");
      // E2B answers with the template's ID, whatever name it was started by.
      assert.equal((await byAlias.getInfo()).templateId, "code-interpreter-v1");
    } finally {
      await byAlias.kill();
    }
    const list = (await server.api("GET", "/templates")).body as Array<{ templateID: string; aliases: string[] }>;
    const tpl = list.find((t) => t.templateID === "code-interpreter-v1");
    assert.deepEqual(tpl?.aliases, ["code-interpreter-v1", "code-interpreter"]);
  });

  test("output streams to the callbacks as the cell produces it", async () => {
    const seen: Array<{ line: string; at: number }> = [];
    const t0 = Date.now();
    const exec = await sbx.runCode("import time\nprint('a', flush=True)\ntime.sleep(1.5)\nprint('b')", {
      onStdout: (m) => {
        seen.push({ line: m.line, at: Date.now() - t0 });
      },
    });
    const done = Date.now() - t0;
    // As the kernel flushes it: a timed flush may fall inside a print, splitting its line.
    assert.equal(seen.map((s) => s.line).join(""), "a\nb\n");
    // 'a' arrived while the cell was still sleeping.
    assert.ok(done - (seen[0]?.at ?? done) >= 1000, `first line at ${seen[0]?.at} ms, end at ${done} ms`);
    assert.deepEqual(
      exec.logs.stdout,
      seen.map((s) => s.line),
    );
  });

  test("stderr and errors with their traceback", async () => {
    const errors: string[] = [];
    const exec = await sbx.runCode("import sys\nprint('careful', file=sys.stderr)\nraise ValueError('boom')", {
      onStderr: (m) => {
        errors.push(m.line);
      },
    });
    assert.deepEqual(exec.logs.stderr, ["careful\n"]);
    assert.deepEqual(errors, ["careful\n"]);
    assert.equal(exec.error?.name, "ValueError");
    assert.equal(exec.error?.value, "boom");
    assert.match(exec.error?.traceback ?? "", /ValueError/);
  });

  test("matplotlib figures come back as PNG, DataFrames as HTML", async () => {
    const plot = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()");
    const png = plot.results.find((r) => r.png)?.png;
    assert.ok(png, `no png in ${JSON.stringify(plot.results.map((r) => r.formats()))}`);
    assert.equal(Buffer.from(png, "base64").subarray(1, 4).toString(), "PNG");
    const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})");
    assert.match(df.results[0]?.html ?? "", /<table/);
    assert.match(df.text ?? "", /a\s+b/);
  });

  test("matplotlib figures come with their chart: line, scatter, bar and pie charts with their data", async () => {
    const line = await sbx.runCode(
      [
        "import matplotlib.pyplot as plt",
        "plt.figure()",
        "plt.plot([0, 1, 2], [0, 1, 4], label='squares')",
        "plt.plot([0, 1, 2], [2, 1, 0], label='down')",
        "plt.title('Growth')",
        "plt.xlabel('Time (s)')",
        "plt.ylabel('Size')",
        "plt.show()",
      ].join("\n"),
    );
    const lc = line.results.find((r) => r.chart)?.chart as LineChart | undefined;
    assert.ok(lc, `no chart in ${JSON.stringify(line.results.map((r) => r.formats()))}`);
    assert.ok(line.results.find((r) => r.chart)?.png, "the chart's result has the PNG too");
    assert.equal(String(lc.type), "line");
    assert.equal(lc.title, "Growth");
    assert.deepEqual([lc.x_label, lc.x_unit, lc.y_label, lc.x_scale], ["Time (s)", "s", "Size", "linear"]);
    assert.deepEqual(
      lc.elements.map((e) => [e.label, e.points]),
      [
        [
          "squares",
          [
            [0, 0],
            [1, 1],
            [2, 4],
          ],
        ],
        [
          "down",
          [
            [0, 2],
            [1, 1],
            [2, 0],
          ],
        ],
      ],
    );
    assert.ok(lc.x_ticks.includes(1) && lc.x_tick_labels.length === lc.x_ticks.length, JSON.stringify(lc));

    const bar = await sbx.runCode(
      "import matplotlib.pyplot as plt\nplt.bar(['A', 'B', 'C'], [3, 5, 2], label='Sales')\nplt.title('Per team')\nplt.show()",
    );
    const bc = bar.results.find((r) => r.chart)?.chart as BarChart | undefined;
    assert.ok(bc, `no chart in ${JSON.stringify(bar.results.map((r) => r.formats()))}`);
    assert.equal(String(bc.type), "bar");
    assert.equal(bc.title, "Per team");
    assert.deepEqual(
      bc.elements.map((e) => [e.label, e.value, e.group]),
      [
        ["A", 3, "Sales"],
        ["B", 5, "Sales"],
        ["C", 2, "Sales"],
      ],
    );
    const scatter = await sbx.runCode(
      "import matplotlib.pyplot as plt\nplt.scatter([1, 2], [5, 7], label='pts')\nplt.show()",
    );
    const sc = scatter.results.find((r) => r.chart)?.chart as ScatterChart | undefined;
    assert.equal(String(sc?.type), "scatter");
    assert.deepEqual(sc?.elements, [
      {
        label: "pts",
        points: [
          [1, 5],
          [2, 7],
        ],
      },
    ]);
    const pie = await sbx.runCode("import matplotlib.pyplot as plt\nplt.pie([1, 3], labels=['x', 'y'])\nplt.show()");
    const pc = pie.results.find((r) => r.chart)?.chart as PieChart | undefined;
    assert.deepEqual(
      pc?.elements.map((e) => [e.label, e.angle, e.radius]),
      [
        ["x", 90, 1],
        ["y", 270, 1],
      ],
    );
    // A figure with nothing drawn has no chart; the cell's other results are unchanged.
    const blank = await sbx.runCode("import matplotlib.pyplot as plt\nplt.figure()\nplt.show()");
    assert.ok(blank.results.every((r) => r.chart === undefined));
  });

  test("per-run env vars are set for that cell only; the sandbox's own are always there", async () => {
    const code = "import os\n(os.environ.get('PER_RUN'), os.environ.get('SANDBOX_WIDE'))";
    assert.equal((await sbx.runCode(code, { envs: { PER_RUN: "yes" } })).text, "('yes', 'from-create')");
    assert.equal((await sbx.runCode(code)).text, "(None, 'from-create')");
  });

  test("a sandbox restored from the warm image gets its own env vars into the kernel", async () => {
    // By now the server has taken the template's warm image: this create is a restore, whose
    // service started before the sandbox existed and reads the variables from envd.
    const other = await Sandbox.create({ envs: { ONLY_OTHER: "other" } });
    try {
      const code = "import os\n(os.environ.get('ONLY_OTHER'), os.environ.get('SANDBOX_WIDE'))";
      assert.equal((await other.runCode(code)).text, "('other', None)");
    } finally {
      await other.kill();
    }
  });

  test("bash and JavaScript keep their own state", async () => {
    await sbx.runCode("GREETING=hi; cd /tmp", { language: "bash" });
    const sh = await sbx.runCode('echo "$GREETING from $(pwd)"; echo oops >&2', { language: "bash" });
    assert.deepEqual(sh.logs.stdout, ["hi from /tmp\n"]);
    assert.deepEqual(sh.logs.stderr, ["oops\n"]);
    assert.equal((await sbx.runCode("(exit 3)", { language: "bash" })).error?.value, "exit code 3");
    // `exit` ends the shell itself: said so, and the next cell gets a new one.
    assert.equal((await sbx.runCode("exit 0", { language: "bash" })).error?.name, "KernelDied");
    assert.deepEqual((await sbx.runCode("echo fresh", { language: "bash" })).logs.stdout, ["fresh\n"]);
    const js = await sbx.runCode("const a = 20; console.log('js'); a * 2 + 2", { language: "javascript" });
    assert.equal(js.text, "42");
    assert.deepEqual(js.logs.stdout, ["js\n"]);
    assert.equal((await sbx.runCode("a + 1", { language: "js" })).text, "21");
    const jsErr = await sbx.runCode("nope()", { language: "javascript" });
    assert.equal(jsErr.error?.name, "ReferenceError");
  });

  test("a cell past its timeout is interrupted and the context stays usable", async () => {
    const t0 = Date.now();
    await assert.rejects(sbx.runCode("import time\ntime.sleep(60)", { timeoutMs: 2000 }), TimeoutError);
    // The kernel was interrupted, not waited for: the next cell answers at once, state intact.
    const next = await sbx.runCode("x");
    assert.equal(next.text, "41");
    assert.ok(Date.now() - t0 < 20_000, `took ${Date.now() - t0} ms`);
    await assert.rejects(sbx.runCode("sleep 60", { language: "bash", timeoutMs: 1500 }), TimeoutError);
    assert.deepEqual((await sbx.runCode("echo again", { language: "bash" })).logs.stdout, ["again\n"]);
  });
});

describe("contexts", () => {
  test("cwd, isolation, list, restart and remove", async () => {
    const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
    assert.equal(ctx.cwd, "/tmp");
    assert.equal(ctx.language, "python");
    assert.equal((await sbx.runCode("import os\nos.getcwd()", { context: ctx })).text, "'/tmp'");
    await sbx.runCode("only_here = 1", { context: ctx });
    assert.equal((await sbx.runCode("only_here")).error?.name, "NameError");
    assert.equal((await sbx.runCode("only_here", { context: ctx })).text, "1");
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
    await sbx.restartCodeContext(ctx);
    const after = await sbx.runCode("import os\n(os.getcwd(), 'only_here' in dir())", { context: ctx });
    assert.equal(after.text, "('/tmp', False)");
    await sbx.removeCodeContext(ctx);
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
    await assert.rejects(sbx.runCode("1", { context: ctx }), NotFoundError);
    await assert.rejects(sbx.removeCodeContext(ctx.id), NotFoundError);
  });

  test("a bash context in another folder", async () => {
    const ctx = await sbx.createCodeContext({ language: "bash", cwd: "/home/user" });
    assert.deepEqual((await sbx.runCode("pwd", { context: ctx })).logs.stdout, ["/home/user\n"]);
    await sbx.removeCodeContext(ctx);
  });
});

/** The service's answer to a caller it must refuse: 401, envd's body, and nothing done. */
async function assertRefused(r: Response, what: string): Promise<void> {
  const text = await r.text();
  assert.equal(r.status, 401, `${what}: ${r.status} ${text}`);
  const body = JSON.parse(text) as { code?: number; message?: string };
  assert.equal(body.code, 401, what);
  assert.match(body.message ?? "", /access token/, what);
}

describe("access", () => {
  test("every route but /health needs the sandbox's access token; a caller without it runs nothing", async () => {
    const ctx = await sbx.createCodeContext();
    const token = tokenOf(sbx);
    const traffic = sbx.trafficAccessToken as string;
    const cell = JSON.stringify({ code: "open('/tmp/ran-without-token', 'w').write('x')" });
    const routes: Array<[string, string, string?]> = [
      ["POST", "/execute", cell],
      ["POST", "/execute/", cell],
      ["POST", "/execute?source=x", cell],
      ["GET", "/contexts"],
      ["POST", "/contexts", "{}"],
      ["DELETE", `/contexts/${ctx.id}`],
      ["POST", `/contexts/${ctx.id}/restart`],
    ];
    // No token; a wrong one; the token envd itself holds (what a fork child or a snapshot
    // start finds in the memory it restored); and, on /execute, the traffic token alone.
    const callers: Array<[string, Record<string, string>]> = [
      ["no token", {}],
      ["a wrong token", { "x-access-token": `${token.slice(0, -2)}xx` }],
      ["envd's own token", { "x-access-token": envdHostToken(token) }],
    ];
    for (const [method, path, body] of routes) {
      for (const [who, headers] of callers) {
        await assertRefused(
          await service(path, { method, headers, ...(body ? { body } : {}) }),
          `${method} ${path}, ${who}`,
        );
      }
      if (path.startsWith("/execute")) {
        await assertRefused(
          await service(path, { method, headers: { "e2b-traffic-access-token": traffic }, body: cell }),
          `${method} ${path}, the traffic token alone`,
        );
      }
    }
    assert.equal(await sbx.files.exists("/tmp/ran-without-token"), false, "no refused cell ran");
    // The context nobody could remove or restart is still there, and still has its state.
    const listed = (await (await service("/contexts", { method: "GET" })).json()) as Array<{ id: string }>;
    assert.ok(listed.some((c) => c.id === ctx.id));
    // /health is open; the SDK's context calls (the traffic token only) work.
    assert.equal((await service("/health", { method: "GET", headers: {} })).status, 200);
    const viaTraffic = await service("/contexts", { method: "GET", headers: { "e2b-traffic-access-token": traffic } });
    assert.equal(viaTraffic.status, 200);
    await sbx.removeCodeContext(ctx);
  });
});

describe("hostile input", () => {
  test("malformed bodies, unknown languages and folders are clear 400s", async () => {
    const bad = async (path: string, body: string, re: RegExp) => {
      const r = await service(path, { body });
      assert.equal(r.status, 400, `${path} ${body}`);
      assert.match(await r.text(), re);
    };
    await bad("/execute", "{nope", /JSON/);
    await bad("/execute", JSON.stringify({ code: 1 }), /code/);
    await bad("/execute", JSON.stringify({ code: "1", language: "python", context_id: "x" }), /context_id or language/);
    await bad("/execute", JSON.stringify({ code: "1", language: "cobol" }), /unsupported language 'cobol'/);
    await bad("/contexts", JSON.stringify({ cwd: "/no/such/dir" }), /not a directory/);
    await assert.rejects(sbx.runCode("1", { language: "cobol" }), SandboxError);
    assert.equal((await service("/contexts/nope/restart")).status, 404);
    assert.equal((await sbx.runCode("1 + 1")).text, "2");
  });

  test("a kernel that dies is restarted; the next cell runs", async () => {
    const died = await sbx.runCode("import os\nos._exit(1)");
    assert.equal(died.error?.name, "KernelDied");
    assert.equal((await sbx.runCode("import os\n(1 + 1, os.getcwd())")).text, "(2, '/home/user')");
  });

  test("a cell printing without end is cut at the service's cap and the service keeps serving", async () => {
    const exec = await sbx.runCode("import sys\nfor _ in range(24):\n    sys.stdout.write('x' * (1 << 20) + '\\n')", {
      timeoutMs: 120_000,
    });
    const total = exec.logs.stdout.reduce((n, s) => n + s.length, 0);
    assert.ok(total <= 16 << 20, `${total} bytes came back`);
    assert.ok(total > 15 << 20, `only ${total} bytes came back`);
    assert.match(exec.logs.stderr.join(""), /dropped/);
    assert.equal((await sbx.runCode("2 + 2")).text, "4");
  });

  test("contexts are bounded: past the limit a 400, and the others keep working", async () => {
    const made = [];
    for (let i = 0; i < 100; i++) made.push(await sbx.createCodeContext({ language: "bash" }));
    await assert.rejects(sbx.createCodeContext({ language: "bash" }), /400/);
    await Promise.all(made.map((c) => sbx.removeCodeContext(c)));
    assert.equal((await sbx.runCode("echo ok", { language: "bash" })).logs.stdout[0], "ok\n");
  });
});

describe("kernel state across pause, resume and fork", () => {
  test("pause and resume keep the kernel's variables", async () => {
    await sbx.runCode("kept = [1, 2, 3]");
    assert.equal(await sbx.pause(), true);
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
    assert.equal((await again.runCode("sum(kept)")).text, "6");
  });

  test("fork children continue from the parent's kernel with their own randomness", async () => {
    await sbx.runCode(
      "import random, os\nimport numpy as np\nprepared = {'rows': 1000}\n_ = (random.random(), np.random.rand())",
    );
    const forked = (await sbx.fork({ count: 2 } as never)) as unknown as Array<Sandbox | Error>;
    const kids = forked.filter((k): k is Sandbox => k instanceof Sandbox);
    try {
      assert.equal(kids.length, 2, String(forked.find((k) => k instanceof Error)));
      const code = "(prepared['rows'], random.random(), float(np.random.rand()), os.urandom(8).hex())";
      const outs = await Promise.all(
        [sbx, ...kids].map(async (k) => {
          const e = await k.runCode(code);
          return e.text ?? JSON.stringify(e.error);
        }),
      );
      for (const o of outs) assert.match(o, /^\(1000, /);
      // Each child has its own token: the parent's, or the one envd held in the memory the
      // children restored, opens none of them.
      for (const kid of kids) {
        for (const t of [tokenOf(sbx), envdHostToken(tokenOf(sbx))]) {
          await assertRefused(
            await service("/execute", {
              to: kid,
              headers: { "x-access-token": t },
              body: JSON.stringify({ code: "1" }),
            }),
            "a fork child with its parent's token",
          );
        }
      }
      const draws = outs.map((o) => o.split(", ").slice(1));
      // Python's random, numpy's global generator and os.urandom: no two sandboxes agree.
      for (let i = 0; i < 3; i++)
        assert.equal(new Set(draws.map((d) => d[i])).size, 3, `draw ${i}: ${outs.join(" | ")}`);
    } finally {
      await Promise.all(kids.map((k) => k.kill().catch(() => false)));
    }
  });
});

test("a sandbox started from a snapshot has its own token; its source's opens it not", async () => {
  const snap = await sbx.createSnapshot();
  const copy = await Sandbox.create(snap.snapshotId, { timeoutMs: 120_000 });
  try {
    assert.equal((await copy.runCode("1 + 1")).text, "2");
    for (const t of [tokenOf(sbx), envdHostToken(tokenOf(sbx))]) {
      await assertRefused(
        await service("/execute", { to: copy, headers: { "x-access-token": t }, body: JSON.stringify({ code: "1" }) }),
        "a snapshot start with its source's token",
      );
    }
  } finally {
    await copy.kill().catch(() => false);
    await Sandbox.deleteSnapshot(snap.snapshotId).catch(() => false);
  }
});

test("a template built on code-interpreter-v1 keeps its service", async () => {
  // A server of its own, over a templates folder that links the shared templates (builds
  // land in it, and nothing is committed).
  const templatesDir = mkdtempSync("/var/tmp/aenv-ci-tpl-");
  mkdirSync(join(TEMPLATES_DIR, ".warm"), { recursive: true });
  for (const name of ["base", "code-interpreter-v1", ".warm"]) {
    symlinkSync(join(TEMPLATES_DIR, name), join(templatesDir, name));
  }
  const own = await startServer({ templatesDir, env: { AENV_COMMIT_TEMPLATES: "false" } });
  const opts = { apiUrl: own.url, sandboxUrl: own.url, apiKey: own.apiKey };
  try {
    const tpl = Template().fromTemplate("code-interpreter-v1").runCmd("echo added > /home/user/added.txt");
    await Template.build(tpl, "ci-plus", opts);
    const s = await Sandbox.create("ci-plus", opts);
    try {
      assert.equal((await s.runCode("open('/home/user/added.txt').read()")).text, "'added\\n'");
    } finally {
      await s.kill();
      // Its warm image went into the shared .warm folder: deleting the template removes it.
      await own.api("DELETE", "/templates/ci-plus");
    }
  } finally {
    await own.stop();
    cleanupDataDir(own);
    rmSync(templatesDir, { recursive: true, force: true });
  }
});
