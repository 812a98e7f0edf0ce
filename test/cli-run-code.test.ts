// `aenv run-code` against a real server: cells in a code-interpreter-v1 sandbox through the
// server's proxy to port 49999, their output on stdout and stderr, results and failing cells.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { describeError, describeResult, parseLine } from "../packages/cli/src/commands/run-code.js";
import { cliRunner } from "./helpers/cli.js";
import { cleanupDataDir, startServer, type TestServer } from "./helpers/server.js";

describe("run-code: rendering", () => {
  test("results show their text when they are the value, and name what a terminal cannot show", () => {
    assert.deepEqual(describeResult({ type: "result", is_main_result: true, text: "42" }), ["42"]);
    assert.deepEqual(
      describeResult({ type: "result", is_main_result: false, text: "<Figure size 640x480>", png: "iVBO" }),
      ["[png]"],
    );
    assert.deepEqual(describeResult({ type: "result", is_main_result: true, text: "   a", html: "<table>" }), [
      "   a",
      "[html]",
    ]);
  });
  test("errors: traceback without colours off a terminal, name and value once", () => {
    const tb = "\x1b[0;31mTraceback\x1b[0m\n\x1b[0;31mZeroDivisionError\x1b[0m: division by zero";
    const e = { type: "error" as const, name: "ZeroDivisionError", value: "division by zero", traceback: tb };
    assert.equal(describeError(e, false), "Traceback\nZeroDivisionError: division by zero\n");
    assert.equal(describeError({ ...e, traceback: "" }, false), "ZeroDivisionError: division by zero\n");
    assert.equal(
      describeError({ ...e, traceback: "in bash" }, false),
      "in bash\nZeroDivisionError: division by zero\n",
    );
  });
  test("lines the sandbox sends are checked, not trusted", () => {
    assert.equal(parseLine("{nope"), undefined);
    assert.equal(parseLine('{"type":"stdout","text":5}'), undefined);
    assert.equal(parseLine('{"type":"mystery"}'), undefined);
    assert.deepEqual(parseLine('{"type":"error","name":7}'), {
      type: "error",
      name: "Error",
      value: "",
      traceback: "",
    });
  });
});

describe("run-code: end to end", () => {
  let server: TestServer;
  let id: string;
  let accessToken: string;
  const tmp = mkdtempSync("/tmp/aenv-cli-run-code-");
  const env = () => ({ ...process.env, AENV_API_URL: server.url, AENV_API_KEY: server.apiKey, XDG_CONFIG_HOME: tmp });
  const { aenv, ok, piped } = cliRunner(env);

  before(async () => {
    server = await startServer();
    const r = await server.api("POST", "/sandboxes", { templateID: "code-interpreter-v1", timeout: 600 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    ({ sandboxID: id, envdAccessToken: accessToken } = r.body as { sandboxID: string; envdAccessToken: string });
  });
  after(async () => {
    if (id) await server?.api("DELETE", `/sandboxes/${id}`).catch(() => undefined);
    await server?.stop();
    if (server) cleanupDataDir(server);
    rmSync(tmp, { recursive: true, force: true });
  });

  test("cells keep their state; output and the cell's value on stdout", async () => {
    assert.equal((await ok("run-code", id, "print('hi')")).stdout, "hi\n");
    assert.equal((await ok("run-code", id, "x=2")).stdout, "");
    assert.equal((await ok("run-code", id, "x*21")).stdout, "42\n");
    // `-` reads the code from stdin.
    const fromStdin = await piped(
      "import sys\nprint('from stdin')\nprint('warned', file=sys.stderr)\n",
      "run-code",
      id,
      "-",
    );
    assert.equal(fromStdin.code, 0, fromStdin.stderr);
    assert.equal(fromStdin.stdout, "from stdin\n");
    assert.equal(fromStdin.stderr, "warned\n");
  });

  test("a failing cell: exit 1, its traceback on stderr", async () => {
    const r = await aenv("run-code", id, "def f():\n    return 1 / 0\nf()");
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /Traceback[\s\S]*return 1 \/ 0[\s\S]*ZeroDivisionError: division by zero\n$/);
    assert.ok(!r.stderr.includes("\x1b["), "no colour escapes off a terminal");
    // The kernel is still the same one.
    assert.equal((await ok("run-code", id, "x")).stdout, "2\n");
  });

  test("other languages, contexts, rich results and --json", async () => {
    const sh = await ok("run-code", id, "echo $((6 * 7)); echo oops >&2", "--language", "bash");
    assert.deepEqual([sh.stdout, sh.stderr], ["42\n", "oops\n"]);
    assert.equal((await ok("run-code", id, "[1, 2].map((n) => n * 2)", "--language", "js")).stdout, "[ 2, 4 ]\n");
    const fig = await ok("run-code", id, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()");
    // A line plot comes with its chart as well as its picture.
    assert.match(fig.stdout, /^\[png, chart\]$/m);
    const json = await ok("run-code", id, "print(1)\n1 + 1", "--json");
    const lines = json.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { type: string; text?: string });
    assert.deepEqual(
      lines.filter((l) => l.type !== "keepalive").map((l) => [l.type, l.text]),
      [
        ["stdout", "1\n"],
        ["result", "2"],
        ["number_of_executions", undefined],
        ["end_of_execution", undefined],
      ],
    );
    // A context of its own (made as the SDK makes one, with the sandbox's token): its folder,
    // not the default's state.
    const made = await fetch(`${server.url}/contexts`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "e2b-sandbox-id": id,
        "e2b-sandbox-port": "49999",
        "x-access-token": accessToken,
      },
      body: JSON.stringify({ cwd: "/tmp" }),
    });
    assert.equal(made.status, 200);
    const ctx = (await made.json()) as { id: string };
    const inCtx = await ok("run-code", id, "import os\n(os.getcwd(), 'x' in dir())", "--context", ctx.id);
    assert.equal(inCtx.stdout, "('/tmp', False)\n");
  });

  test("usage errors and sandboxes without the service are one clear line", async () => {
    const both = await aenv("run-code", id, "1", "--language", "bash", "--context", "c");
    assert.equal(both.code, 1);
    assert.equal(both.stderr, "aenv: give --language or --context, not both\n");
    const lang = await aenv("run-code", id, "1", "--language", "cobol");
    assert.equal(lang.code, 1);
    assert.match(lang.stderr, /--language must be one of python, bash, javascript, js, ts/);
    const gone = await aenv("run-code", "inosuchsandbox00", "1");
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /^aenv: .*not found.*\(HTTP 404\)\n$/);
    const base = await server.api("POST", "/sandboxes", { templateID: "base" });
    const baseId = (base.body as { sandboxID: string }).sandboxID;
    try {
      const none = await aenv("run-code", baseId, "1");
      assert.equal(none.code, 1);
      assert.match(none.stderr, /^aenv: nothing is listening on port 49999 in sandbox .*\(HTTP 502\)\n$/);
    } finally {
      await server.api("DELETE", `/sandboxes/${baseId}`);
    }
  });
});
