// Hostile input: bad ports in every routing form, sandboxes that answer garbage, and a flood of
// malformed API requests. Every answer is a 4xx or a deliberate 5xx with the E2B body
// {code, message}; /health answers throughout; a running sandbox is untouched; and the
// server's last-resort handlers never fire (a "BUG:" line would mean a promise got away).
import assert from "node:assert/strict";
import { request } from "node:http";
import { connect } from "node:net";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { untilListening } from "./helpers/sandbox.js";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
let sbx: Sandbox;

// Answers every connection with the bytes of a file, whatever was asked.
const RAW_SERVER = `import socket, sys
reply = open(sys.argv[2], "rb").read()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    try:
        c.recv(65536)
        c.sendall(reply)
    except OSError:
        pass
    c.close()
`;

const REPLIES: Record<number, string> = {
  8081: "HTTP/1.1 050 Weird\r\ncontent-length: 2\r\n\r\nhi",
  8082: "this is not http\r\n\r\n",
  8083: "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
};

before(async () => {
  server = await startServer();
  useE2b(server);
  sbx = await Sandbox.create();
  await sbx.files.write("/tmp/raw.py", RAW_SERVER);
  for (const [port, reply] of Object.entries(REPLIES)) {
    await sbx.files.write(`/tmp/reply-${port}`, reply);
    await sbx.commands.run(`python3 /tmp/raw.py ${port} /tmp/reply-${port}`, { background: true });
  }
  await Promise.all(Object.keys(REPLIES).map((p) => untilListening(sbx, Number(p))));
});

after(async () => {
  await sbx?.kill().catch(() => {});
  await server?.stop();
  if (server) cleanupDataDir(server);
});

interface Answer {
  status: number;
  body: string;
}

/** One request with exactly these headers (no API key unless given), read to the end. */
function raw(path: string, headers: Record<string, string> = {}, method = "GET", body?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: server.port, path, method, headers, agent: false }, (res) => {
      let b = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (b += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: b }));
      res.on("error", reject);
    });
    req.setTimeout(30_000, () => req.destroy(new Error(`no answer to ${method} ${path} within 30 s`)));
    req.on("error", reject);
    req.end(body);
  });
}

function assertE2bError(a: Answer, status: number | ((s: number) => boolean), what: string): void {
  const ok = typeof status === "number" ? a.status === status : status(a.status);
  assert.ok(ok, `${what}: status ${a.status}, body ${a.body}`);
  let parsed: { code?: unknown; message?: unknown };
  try {
    parsed = JSON.parse(a.body) as typeof parsed;
  } catch {
    assert.fail(`${what}: body is not JSON: ${a.body.slice(0, 200)}`);
  }
  assert.equal(parsed.code, a.status, `${what}: code in the body`);
  assert.equal(typeof parsed.message, "string", `${what}: message`);
}

async function assertServerHealthy(): Promise<void> {
  assert.equal(server.proc.exitCode, null, `server exited:\n${server.logs().slice(-3000)}`);
  assert.equal((await fetch(`${server.url}/health`)).status, 204);
  assert.doesNotMatch(server.logs(), /BUG: un/, "a promise or exception escaped to the safety net");
}

test("ports outside 1..65535 are a 400 in all three routing forms, with no API key", async () => {
  const id = sbx.sandboxId;
  const domain = server.domain;
  for (const port of ["65536", "70000", "0", "99999999", "-1", "abc", "8.5"]) {
    assertE2bError(await raw(`/proxy/${id}/${port}/`), 400, `path form, port ${port}`);
    assertE2bError(await raw("/", { "e2b-sandbox-id": id, "e2b-sandbox-port": port }), 400, `header form, ${port}`);
    assertE2bError(await raw("/x", { "x-aenv-sandbox-id": id, "x-aenv-target-port": port }), 400, `x-aenv, ${port}`);
  }
  for (const port of ["65536", "70000", "0", "123456", "000000000001"]) {
    assertE2bError(await raw("/", { host: `${port}-${id}.${domain}` }), 400, `host form, port ${port}`);
  }
  // The same sandbox on a valid port still answers through every form.
  assert.deepEqual(await raw(`/proxy/${id}/8083/`), { status: 200, body: "ok" });
  assert.deepEqual(await raw("/", { host: `8083-${id}.${domain}` }), { status: 200, body: "ok" });
  assert.deepEqual(await raw("/", { "e2b-sandbox-id": id, "e2b-sandbox-port": "8083" }), { status: 200, body: "ok" });
  await assertServerHealthy();
});

test("a sandbox answering a status below 100 or a non-HTTP line gets a 502, not a crash", async () => {
  const id = sbx.sandboxId;
  for (let i = 0; i < 5; i++) {
    assertE2bError(await raw(`/proxy/${id}/8081/`), 502, "status 050 via path");
    assertE2bError(await raw("/", { host: `8081-${id}.${server.domain}` }), 502, "status 050 via host");
    assertE2bError(await raw("/", { "e2b-sandbox-id": id, "e2b-sandbox-port": "8082" }), 502, "garbage via header");
    assertE2bError(await raw(`/proxy/${id}/8082/`), 502, "garbage via path");
  }
  await assertServerHealthy();
});

/** A WebSocket upgrade on a raw socket; resolves with the status line and the body. */
function upgrade(path: string, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const s = connect(server.port, "127.0.0.1");
    let data = "";
    s.setTimeout(30_000, () => s.destroy(new Error("upgrade: no answer within 30 s")));
    s.on("connect", () => {
      const hs = {
        host: `127.0.0.1:${server.port}`,
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        ...headers,
      };
      s.write(
        `GET ${path} HTTP/1.1\r\n${Object.entries(hs)
          .map(([k, v]) => `${k}: ${v}\r\n`)
          .join("")}\r\n`,
      );
    });
    s.on("data", (d) => (data += d.toString()));
    s.on("error", reject);
    s.on("close", () => {
      const m = /^HTTP\/1\.1 (\d{3})[^\r]*\r\n[\s\S]*?\r\n\r\n([\s\S]*)$/.exec(data);
      if (!m) return reject(new Error(`upgrade: not an HTTP answer: ${JSON.stringify(data.slice(0, 200))}`));
      resolve({ status: Number(m[1]), body: m[2] as string });
    });
  });
}

test("a WebSocket upgrade to a bad port or a dead one is answered with an E2B error", async () => {
  const id = sbx.sandboxId;
  assertE2bError(await upgrade(`/proxy/${id}/65536/ws`, {}), 400, "upgrade, path form");
  assertE2bError(await upgrade("/ws", { host: `70000-${id}.${server.domain}` }), 400, "upgrade, host form");
  assertE2bError(await upgrade("/ws", { "e2b-sandbox-id": id, "e2b-sandbox-port": "123456" }), 400, "upgrade, header");
  assertE2bError(await upgrade(`/proxy/${id}/9/ws`, {}), 502, "upgrade, nothing listening");
  assertE2bError(await upgrade("/proxy/inosuchsandbox0000000/8080/ws", {}), 502, "upgrade, unknown sandbox");
  await assertServerHealthy();
});

test("hundreds of malformed API requests in parallel: all E2B errors, /health throughout", async () => {
  const key = { "x-api-key": server.apiKey };
  const json = { ...key, "content-type": "application/json" };
  const long = "i".repeat(5000);
  const ids = ["..", "..%2F..%2Fetc", "%2e%2e", long, "a%00b", "%ff%fe", "../../../../etc/passwd", "id%20with%20space"];
  const reqs: Array<() => Promise<[string, Answer]>> = [];
  const add = (method: string, path: string, headers: Record<string, string>, body?: string) =>
    reqs.push(async () => [
      `${method} ${path.slice(0, 80)} ${body?.slice(0, 40) ?? ""}`,
      await raw(path, headers, method, body),
    ]);
  for (const id of ids) {
    add("GET", `/sandboxes/${id}`, key);
    add("DELETE", `/sandboxes/${id}`, key);
    add("POST", `/sandboxes/${id}/pause`, json, "{}");
    add("POST", `/sandboxes/${id}/resume`, json, "{}");
    add("POST", `/sandboxes/${id}/connect`, json, '{"timeout": 10}');
    add("POST", `/sandboxes/${id}/timeout`, json, '{"timeout": 10}');
    add("POST", `/sandboxes/${id}/refreshes`, json, "{}");
    add("POST", `/sandboxes/${id}/fork`, json, '{"count": 2}');
    add("POST", `/sandboxes/${id}/snapshots`, json, "{}");
    add("GET", `/sandboxes/${id}/metrics`, key);
    add("GET", `/snapshots/${id}`, key);
    add("DELETE", `/snapshots/${id}`, key);
    add("GET", `/templates/${id}`, key);
    add("DELETE", `/templates/${id}`, key);
    add("POST", "/v2/sandboxes", json, JSON.stringify({ templateID: id }));
    add("GET", `/templates/${id}/builds/${id}/status`, key);
    add("GET", `/volumes/${id}`, key);
    add("DELETE", `/volumes/${id}`, key);
    add("GET", `/volumecontent/${id}/dir?path=/`, key);
    add("GET", `/volumecontent/${id}/path?path=..%2F..%2Fetc`, key);
    add("GET", `/volumecontent/${id}/file?path=${id}`, key);
    add("PUT", `/volumecontent/${id}/file?path=../x`, { ...key, "content-type": "application/octet-stream" }, "x");
    add("DELETE", `/volumecontent/${id}/path?path=${id}`, key);
    add("GET", `/secrets/${id}`, key);
    add("DELETE", `/secrets/${id}`, key);
    add("POST", `/secrets/${id}`, json, '{"value": 1}');
    add("GET", `/sandboxes/${sbx.sandboxId}/metrics?start=${id}&end=-1`, key);
  }
  const bodies = [
    '{"templateID": "base",',
    "[]",
    "null",
    "42",
    '"base"',
    '{"templateID": 42}',
    '{"templateID": "base", "timeout": "soon"}',
    '{"templateID": "base", "timeout": -5}',
    '{"templateID": "base", "timeout": 1e309}',
    '{"templateID": "base", "envVars": {"A": 1}}',
    '{"templateID": "base", "metadata": [1,2]}',
    '{"templateID": "base", "autoPause": "yes"}',
    '{"templateID": "base", "__proto__": {"x": 1}}',
    '{"templateID": {"$gt": ""}}',
    `{"templateID": "${"x".repeat(5000)}"}`,
    "\u0000\u0001\u0002",
  ];
  for (const b of bodies) {
    add("POST", "/v2/sandboxes", json, b);
    add("POST", "/sandboxes", json, b);
    add("POST", `/sandboxes/${sbx.sandboxId}/timeout`, json, b);
    add("POST", "/v3/templates", json, b);
    add("POST", "/templates/tags", json, b);
    add("POST", "/volumes", json, b);
    add("POST", "/secrets", json, b);
  }
  for (const b of [
    '{"count": -1}',
    '{"count": "x"}',
    '{"count": 1e9}',
    '{"count": 1.5}',
    '{"count": 2, "timeout": "x"}',
  ]) {
    add("POST", `/sandboxes/${sbx.sandboxId}/fork`, json, b);
  }
  for (const q of [
    "?limit=-1",
    "?limit=abc",
    "?limit=99999999999",
    `?nextToken=${long}`,
    "?state=bogus",
    "?metadata=%zz",
    "?startedAfter=yesterday",
    "?order=sideways",
  ]) {
    add("GET", `/v2/sandboxes${q}`, key);
  }
  // Not one of them may be unauthenticated-but-accepted.
  for (const id of ids.slice(0, 3)) add("DELETE", `/sandboxes/${id}`, {});
  // Twice over, all at once.
  reqs.push(...reqs);
  assert.ok(reqs.length >= 400, `only ${reqs.length} requests`);

  let healthFailures = 0;
  let healthChecks = 0;
  let flooding = true;
  const healthLoop = (async () => {
    while (flooding) {
      const r = await fetch(`${server.url}/health`).catch(() => undefined);
      healthChecks++;
      if (r?.status !== 204) healthFailures++;
      await new Promise((res) => setTimeout(res, 20));
    }
  })();
  const answers = await Promise.all(reqs.map((r) => r()));
  flooding = false;
  await healthLoop;

  for (const [what, a] of answers) {
    // A deliberate answer: a client error, or 5xx only where the server says why.
    assertE2bError(a, (s) => s >= 400 && s < 600 && s !== 500, what);
  }
  assert.equal(healthFailures, 0, `/health failed ${healthFailures} of ${healthChecks} times`);
  assert.ok(healthChecks > 0);
  // The running sandbox was not touched by any of it.
  const r = await sbx.commands.run("echo still-here");
  assert.equal(r.stdout, "still-here\n");
  assert.equal(await sbx.isRunning(), true);
  await assertServerHealthy();
});
