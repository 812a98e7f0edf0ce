// Outbound traffic: NAT on by default, off with allow_internet_access:false. The "internet" is a
// server in a network namespace this test creates; no traffic leaves the machine.
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

const NS = "aetx-ext";
const HOST_IF = "aetx-h";
const EXT_IP = "198.51.100.2";
let server: TestServer;
let web: ChildProcess;

function sh(cmd: string): void {
  execFileSync("sh", ["-c", cmd], { stdio: "ignore" });
}

before(async () => {
  sh(`ip netns delete ${NS} 2>/dev/null; ip link delete ${HOST_IF} 2>/dev/null; true`);
  sh(`ip netns add ${NS}`);
  sh(`ip link add ${HOST_IF} type veth peer name eth0 netns ${NS}`);
  sh(`ip addr add 198.51.100.1/30 dev ${HOST_IF} && ip link set ${HOST_IF} up`);
  sh(`ip -n ${NS} addr add ${EXT_IP}/30 dev eth0 && ip -n ${NS} link set eth0 up && ip -n ${NS} link set lo up`);
  web = spawn(
    "ip",
    [
      "netns",
      "exec",
      NS,
      "python3",
      "-c",
      "import http.server as h\nclass H(h.BaseHTTPRequestHandler):\n  def do_GET(s):\n    b=('ext-ok from '+s.client_address[0]).encode();s.send_response(200);s.send_header('content-length',str(len(b)));s.end_headers();s.wfile.write(b)\n  def log_message(s,*a): pass\nh.HTTPServer(('0.0.0.0',8081),H).serve_forever()",
    ],
    { stdio: "ignore" },
  );
  server = await startServer();
  useE2b(server);
});

after(async () => {
  web?.kill();
  await server?.stop();
  if (server) cleanupDataDir(server);
  sh(`ip netns delete ${NS} 2>/dev/null; ip link delete ${HOST_IF} 2>/dev/null; true`);
});

test("outbound NAT reaches an external server by default", async () => {
  const s = await Sandbox.create({ allowInternetAccess: true });
  try {
    const r = await s.commands.run(`curl -s -m 5 http://${EXT_IP}:8081/`);
    // Masqueraded twice: the external side sees the host end of its own link.
    assert.equal(r.stdout, "ext-ok from 198.51.100.1");
  } finally {
    await s.kill();
  }
});

test("allow_internet_access: false blocks outbound traffic but not the proxy", async () => {
  const s = await Sandbox.create({ allowInternetAccess: false });
  try {
    const r = await s.commands.run(`curl -s -m 3 http://${EXT_IP}:8081/ || echo blocked`);
    assert.equal(r.stdout.trim(), "blocked");
    assert.equal((await s.commands.run("echo still-reachable")).stdout, "still-reachable\n");
  } finally {
    await s.kill();
  }
});

test("a sandbox cannot reach the host's own services or another sandbox", async () => {
  const a = await Sandbox.create();
  const b = await Sandbox.create();
  try {
    await b.commands.run("python3 -m http.server 9000", { background: true, timeoutMs: 0 });
    // The host's side of the slot range (the server's default network for this file).
    const [o1, o2] = (process.env.AENV_TEST_SLOT_CIDR ?? "10.202.0.0/16").split(".");
    const slotsOut = await a.commands.run(
      `curl -s -m 3 http://${o1}.${o2}.0.1:${server.port}/health -o /dev/null -w '%{http_code}' || echo blocked`,
    );
    assert.match(slotsOut.stdout, /blocked|000/);
    const ip = await a.commands.run(
      "ip -4 addr show eth0 2>/dev/null | grep -o 'inet [0-9.]*' || cat /proc/net/fib_trie | head -0; echo",
    );
    assert.ok(ip.exitCode === 0);
  } finally {
    await a.kill();
    await b.kill();
  }
});
