// The e2b SDK compatibility suite, its proxy half: the unmodified `e2b` npm package reaches
// servers inside a real runsc sandbox through an aenv-server's proxy (Host header, /proxy
// path, WebSocket), and the proxy keeps the platform's secrets from them.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Sandbox, SandboxError } from "e2b";
import { untilListening } from "./helpers/sandbox.js";
import { cleanupDataDir, getViaHost, startServer, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
let sbx: Sandbox;

before(async () => {
  server = await startServer();
  useE2b(server);
  sbx = await Sandbox.create();
});

after(async () => {
  await sbx?.kill().catch(() => {});
  await server?.stop();
  if (server) cleanupDataDir(server);
});

describe("proxy", () => {
  test("getHost reaches a server inside the sandbox by Host header and by /proxy path", async () => {
    await sbx.commands.run("mkdir -p /tmp/www && echo hello-from-sandbox > /tmp/www/index.html");
    // `python`, as E2B's base template has it (its own SDK tests call it so).
    await sbx.commands.run("cd /tmp/www && python -m http.server 8080", { background: true, timeoutMs: 0 });
    const host = sbx.getHost(8080);
    assert.equal(host, `8080-${sbx.sandboxId}.${server.domain}`);
    let r = { status: 0, body: "" };
    for (let i = 0; i < 50; i++) {
      r = await getViaHost(server, host, "/index.html");
      if (r.status === 200) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    assert.equal(r.status, 200);
    assert.equal(r.body, "hello-from-sandbox\n");
    const p = await fetch(`${server.url}/proxy/${sbx.sandboxId}/8080/index.html`);
    assert.equal(await p.text(), "hello-from-sandbox\n");
    const closed = await getViaHost(server, `8099-${sbx.sandboxId}.${server.domain}`);
    assert.equal(closed.status, 502);
  });

  test("the platform's API key never reaches a server in the sandbox; other headers do", async () => {
    const echo = [
      "import http.server as h",
      "class H(h.BaseHTTPRequestHandler):",
      "  def do_GET(s):",
      "    b=str(s.headers).encode();s.send_response(200);s.send_header('content-length',str(len(b)));s.end_headers();s.wfile.write(b)",
      "  def log_message(s,*a): pass",
      "h.HTTPServer(('0.0.0.0',8082),H).serve_forever()",
    ].join("\n");
    await sbx.files.write("/tmp/echo.py", echo);
    await sbx.commands.run("python3 /tmp/echo.py", { background: true, timeoutMs: 0 });
    await untilListening(sbx, 8082);
    const sent = { "x-api-key": server.apiKey, "x-mine": "kept", authorization: "Bearer app-token" };
    const viaPath = await (await fetch(`${server.url}/proxy/${sbx.sandboxId}/8082/`, { headers: sent })).text();
    const viaHeaders = await (
      await fetch(`${server.url}/`, {
        headers: { ...sent, "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8082" },
      })
    ).text();
    for (const seen of [viaPath, viaHeaders]) {
      assert.match(seen, /x-mine: kept/i);
      assert.match(seen, /authorization: Bearer app-token/i, "the app's own credentials pass");
      assert.doesNotMatch(seen, new RegExp(server.apiKey), "the API key is not forwarded");
    }
  });

  test("a WebSocket upgrade is tunnelled to the sandbox port", async () => {
    const server_py = [
      "import socket,hashlib,base64",
      "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',8765));s.listen(1)",
      "c,_=s.accept();d=c.recv(4096).decode()",
      "k=[l.split(': ')[1] for l in d.split('\\r\\n') if l.lower().startswith('sec-websocket-key')][0]",
      "a=base64.b64encode(hashlib.sha1((k+'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').encode()).digest()).decode()",
      "c.send(('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: '+a+'\\r\\n\\r\\n').encode())",
      "c.send(bytes([0x81,5])+b'hello');c.close()",
    ].join("\n");
    await sbx.files.write("/tmp/ws.py", server_py);
    await sbx.commands.run("python3 /tmp/ws.py", { background: true, timeoutMs: 0 });
    await untilListening(sbx, 8765);
    const { WebSocket } = await import("ws");
    const msg = await new Promise<string>((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${server.port}/`, {
        headers: { host: `8765-${sbx.sandboxId}.${server.domain}` },
      });
      ws.on("message", (d) => resolve(d.toString()));
      ws.on("error", reject);
    });
    assert.equal(msg, "hello");
  });

  test("traffic for an unknown sandbox gets 502 with E2B's body", async () => {
    const id = "i11111111111111111111";
    const r = await fetch(`${server.url}/health`, { headers: { "e2b-sandbox-id": id, "e2b-sandbox-port": "49983" } });
    assert.equal(r.status, 502);
    assert.deepEqual(await r.json(), { code: 502, message: "The sandbox was not found", sandboxId: id });
    const app = await getViaHost(server, `3000-${id}.${server.domain}`);
    assert.equal(app.status, 502);
    assert.equal((JSON.parse(app.body) as { sandboxId: string }).sandboxId, id);
  });

  test("a wrong envd access token is refused", async () => {
    const r = await fetch(`${server.url}/process.Process/List`, {
      method: "POST",
      headers: { "e2b-sandbox-id": sbx.sandboxId, "content-type": "application/json", "x-access-token": "wrong" },
      body: "{}",
    });
    assert.equal(r.status, 401);
    assert.ok(SandboxError);
  });
});
