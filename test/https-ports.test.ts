// network.httpsPorts: the proxy reaches the listed sandbox ports over TLS (the sandbox's own,
// self-signed certificate, not verified, as on E2B); other ports stay plain HTTP.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, getViaHost, startServer, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
const certDir = mkdtempSync("/tmp/aehp-cert-");

// Answers with the scheme it was reached by and the path.
const SERVE = `
import http.server as h, ssl, sys
class H(h.BaseHTTPRequestHandler):
  def do_GET(s):
    b=('%s %s' % (sys.argv[1], s.path)).encode()
    s.send_response(200);s.send_header('content-length',str(len(b)));s.end_headers();s.wfile.write(b)
  def log_message(s,*a): pass
srv=h.HTTPServer(('0.0.0.0',int(sys.argv[2])),H)
if sys.argv[1]=='tls':
  ctx=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER);ctx.load_cert_chain('/tmp/cert.pem','/tmp/key.pem')
  srv.socket=ctx.wrap_socket(srv.socket,server_side=True)
srv.serve_forever()
`;

before(async () => {
  execFileSync("sh", [
    "-c",
    `openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sandbox -keyout ${certDir}/key.pem -out ${certDir}/cert.pem 2>/dev/null`,
  ]);
  server = await startServer();
  useE2b(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
  rmSync(certDir, { recursive: true, force: true });
});

async function serve(s: Sandbox, kind: "tls" | "plain", port: number): Promise<void> {
  await s.files.write("/tmp/serve.py", SERVE);
  await s.files.write("/tmp/cert.pem", readFileSync(`${certDir}/cert.pem`, "utf8"));
  await s.files.write("/tmp/key.pem", readFileSync(`${certDir}/key.pem`, "utf8"));
  await s.commands.run(`python3 /tmp/serve.py ${kind} ${port}`, { background: true, timeoutMs: 0 });
  const wait = `import socket,time\nfor i in range(100):\n  try: socket.create_connection(('127.0.0.1',${port}),1).close(); break\n  except OSError: time.sleep(0.1)`;
  await s.files.write("/tmp/wait.py", wait);
  await s.commands.run("python3 /tmp/wait.py");
}

test("listed ports are reached over TLS, the others over plain HTTP", async () => {
  const s = await Sandbox.create({ network: { httpsPorts: [8443] } });
  try {
    await serve(s, "tls", 8443);
    await serve(s, "plain", 8080);
    const tls = await getViaHost(server, s.getHost(8443), "/a?b=1");
    assert.equal(tls.status, 200);
    assert.equal(tls.body, "tls /a?b=1");
    const plain = await getViaHost(server, s.getHost(8080), "/c");
    assert.equal(plain.body, "plain /c");
    assert.deepEqual((await s.getInfo()).network?.httpsPorts, [8443]);
    // Kept by an update (a creation-time setting, like maskRequestHost).
    await s.updateNetwork({ denyOut: ["203.0.113.9"] });
    assert.equal((await getViaHost(server, s.getHost(8443), "/d")).body, "tls /d");
  } finally {
    await s.kill();
  }
});

test("without httpsPorts a TLS server is spoken to in plain HTTP (no answer it understands)", async () => {
  const s = await Sandbox.create();
  try {
    await serve(s, "tls", 8443);
    assert.equal((await getViaHost(server, s.getHost(8443), "/")).status, 502);
  } finally {
    await s.kill();
  }
});

test("the envd port cannot be listed", async () => {
  const r = await server.api("POST", "/sandboxes", { templateID: "base", network: { httpsPorts: [49983] } });
  assert.equal(r.status, 400);
  assert.match((r.body as { message: string }).message, /httpsPorts: the envd port \(49983\)/);
});
