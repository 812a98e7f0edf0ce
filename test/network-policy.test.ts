// Network policy: allowOut/denyOut by address and by domain, always-denied ranges,
// updateNetwork, rules kept across pause/resume, fork and snapshots, private sandbox ports
// (traffic access token) and maskRequestHost. "The internet" is a network namespace this test
// creates at TEST-NET-3 addresses; nothing leaves the machine.
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Sandbox, Secret } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

const NS = "aetp-ext";
const HOST_IF = "aetp-h";
const WEB_A = "203.0.113.10";
const WEB_B = "203.0.113.20";
/** A private address and a link-local one the host reaches: sandboxes must not. */
const PRIVATE = "10.250.8.2";
const LINK_LOCAL = "169.254.77.77";
let server: TestServer;
let web: ChildProcess;
const certDir = mkdtempSync("/tmp/aetp-cert-");

function sh(cmd: string): string {
  return execFileSync("sh", ["-c", cmd], { encoding: "utf8" });
}

// Answers every request, on 80 and (TLS) 443, with the address it was reached at and the Host.
const WEB = `
import http.server as h, ssl, threading, sys
class H(h.BaseHTTPRequestHandler):
  def do_GET(s):
    if s.path=='/auth': b=('auth=%s' % s.headers.get('Authorization')).encode()
    else: b=('web %s host=%s' % (s.connection.getsockname()[0], s.headers.get('Host'))).encode()
    s.send_response(200);s.send_header('content-length',str(len(b)));s.end_headers();s.wfile.write(b)
  def log_message(s,*a): pass
plain=h.ThreadingHTTPServer(('0.0.0.0',80),H)
tls=h.ThreadingHTTPServer(('0.0.0.0',443),H)
ctx=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER);ctx.load_cert_chain(sys.argv[1],sys.argv[2])
tls.socket=ctx.wrap_socket(tls.socket,server_side=True)
threading.Thread(target=tls.serve_forever,daemon=True).start()
plain.serve_forever()
`;

before(async () => {
  sh(`ip netns delete ${NS} 2>/dev/null; ip link delete ${HOST_IF} 2>/dev/null; true`);
  sh(
    `openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=allowed.test -addext subjectAltName=DNS:allowed.test -keyout ${certDir}/key.pem -out ${certDir}/cert.pem 2>/dev/null`,
  );
  sh(`ip netns add ${NS}`);
  sh(`ip link add ${HOST_IF} type veth peer name eth0 netns ${NS}`);
  sh(`ip addr add 203.0.113.1/24 dev ${HOST_IF} && ip link set ${HOST_IF} up`);
  sh(`ip route add ${PRIVATE}/32 dev ${HOST_IF} && ip route add ${LINK_LOCAL}/32 dev ${HOST_IF}`);
  for (const a of [`${WEB_A}/24`, `${WEB_B}/24`, `${PRIVATE}/32`, `${LINK_LOCAL}/32`]) {
    sh(`ip -n ${NS} addr add ${a} dev eth0`);
  }
  sh(`ip -n ${NS} link set eth0 up && ip -n ${NS} link set lo up && ip -n ${NS} route add default dev eth0`);
  writeFileSync(join(certDir, "web.py"), WEB);
  web = spawn(
    "ip",
    ["netns", "exec", NS, "python3", join(certDir, "web.py"), `${certDir}/cert.pem`, `${certDir}/key.pem`],
    {
      stdio: "ignore",
    },
  );
  // A secret stored before values were checked (a newline in it), as an upgraded server finds it.
  const dataDir = mkdtempSync("/var/tmp/aenv-test-");
  mkdirSync(join(dataDir, "secrets"), { mode: 0o700 });
  const seeded = { id: "sec_seeded", name: "seeded-nl", value: "a\r\nx-injected: 1", version: 1, metadata: {} };
  writeFileSync(
    join(dataDir, "secrets", "secrets.json"),
    JSON.stringify([{ ...seeded, allowedHosts: ["allowed.test"], createdAt: 1, updatedAt: 1 }]),
    { mode: 0o600 },
  );
  server = await startServer({
    dataDir,
    env: {
      AENV_EGRESS_HOSTS: [
        `allowed.test=${WEB_A}`,
        `deep.sub.allowed.test=${WEB_A}`,
        `other.test=${WEB_B}`,
        `inside.test=${PRIVATE}`,
      ].join(","),
      // The test's web server signs for itself; the egress proxy verifies upstream TLS.
      AENV_EGRESS_UPSTREAM_CA_FILE: `${certDir}/cert.pem`,
    },
  });
  useE2b(server);
  // The host itself reaches all of them: what a sandbox cannot reach is its rules' doing.
  for (const ip of [WEB_A, WEB_B, PRIVATE, LINK_LOCAL]) {
    for (let i = 0; ; i++) {
      try {
        assert.match(sh(`curl -s -m 2 http://${ip}/`), new RegExp(`^web ${ip.replaceAll(".", "\\.")}`));
        break;
      } catch (err) {
        if (i > 20) throw err;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }
});

after(async () => {
  web?.kill();
  await server?.stop();
  if (server) cleanupDataDir(server);
  sh(`ip netns delete ${NS} 2>/dev/null; ip link delete ${HOST_IF} 2>/dev/null; true`);
  rmSync(certDir, { recursive: true, force: true });
});

/** What a sandbox gets from a URL: the body, or "blocked". */
async function fetchIn(s: Sandbox, args: string): Promise<string> {
  const r = await s.commands.run(`curl -sk --connect-timeout 2 -m 4 ${args} || echo blocked`);
  return r.stdout.trim();
}

test("allowOut wins over denyOut: only the listed address is reachable", async () => {
  const s = await Sandbox.create({ network: { denyOut: ["0.0.0.0/0"], allowOut: [`${WEB_A}/32`] } });
  try {
    assert.equal(await fetchIn(s, `http://${WEB_A}/`), `web ${WEB_A} host=${WEB_A}`);
    assert.equal(await fetchIn(s, `http://${WEB_B}/`), "blocked");
  } finally {
    await s.kill();
  }
});

test("denyOut alone blocks what it lists and nothing else", async () => {
  const s = await Sandbox.create({ network: { denyOut: [WEB_B] } });
  try {
    assert.equal(await fetchIn(s, `http://${WEB_A}/`), `web ${WEB_A} host=${WEB_A}`);
    assert.equal(await fetchIn(s, `http://${WEB_B}/`), "blocked");
  } finally {
    await s.kill();
  }
});

test("private and link-local ranges stay closed, even when a sandbox allows them", async () => {
  const s = await Sandbox.create({ network: { allowOut: [PRIVATE, `${LINK_LOCAL}/32`, "10.0.0.0/8"] } });
  try {
    assert.equal(await fetchIn(s, `http://${PRIVATE}/`), "blocked");
    assert.equal(await fetchIn(s, `http://${LINK_LOCAL}/`), "blocked");
    assert.equal(await fetchIn(s, `http://${WEB_A}/`), `web ${WEB_A} host=${WEB_A}`);
  } finally {
    await s.kill();
  }
});

test("domains: the egress proxy lets through allowed names only, to the address it resolves", async () => {
  const s = await Sandbox.create({ network: { denyOut: ["0.0.0.0/0"], allowOut: ["allowed.test", "*.allowed.test"] } });
  try {
    assert.equal(
      await fetchIn(s, `--resolve allowed.test:80:${WEB_A} http://allowed.test/`),
      `web ${WEB_A} host=allowed.test`,
    );
    // Claiming an allowed name while dialling a denied address reaches the name's own address.
    assert.equal(
      await fetchIn(s, `--resolve allowed.test:80:${WEB_B} http://allowed.test/`),
      `web ${WEB_A} host=allowed.test`,
    );
    assert.equal(
      await fetchIn(s, `--resolve deep.sub.allowed.test:443:${WEB_B} https://deep.sub.allowed.test/`),
      `web ${WEB_A} host=deep.sub.allowed.test`,
    );
    // TLS: the SNI decides, the proxy does not decrypt.
    assert.equal(
      await fetchIn(s, `--resolve allowed.test:443:${WEB_B} https://allowed.test/`),
      `web ${WEB_A} host=allowed.test`,
    );
    assert.equal(await fetchIn(s, `--resolve other.test:443:${WEB_B} https://other.test/`), "blocked");
    assert.match(
      await fetchIn(s, `-o /dev/null -w '%{http_code}' -H 'Host: other.test' http://${WEB_B}/`),
      /403|blocked/,
    );
    // Plain HTTP to a denied address: the proxy answers 403 itself.
    assert.match(await fetchIn(s, `-o /dev/null -w '%{http_code}' http://${WEB_B}/`), /403|blocked/);
    // A name that resolves into a closed range stays closed.
    const inside = await Sandbox.create({ network: { denyOut: ["0.0.0.0/0"], allowOut: ["inside.test"] } });
    try {
      assert.match(
        await fetchIn(inside, `-o /dev/null -w '%{http_code}' --resolve inside.test:80:${WEB_B} http://inside.test/`),
        /403|blocked/,
      );
    } finally {
      await inside.kill();
    }
  } finally {
    await s.kill();
  }
});

test("bad rules are refused with 400: domains in denyOut, garbage, a malformed egress proxy", async () => {
  await assert.rejects(Sandbox.create({ network: { denyOut: ["example.com"] } }), /400.*deny/i);
  await assert.rejects(Sandbox.create({ network: { allowOut: ["1.2.3.4/33"] } }), /400/);
  await assert.rejects(Sandbox.create({ network: { allowOut: ["*"] } }), /400/);
  await assert.rejects(
    Sandbox.create({ network: { egressProxy: { address: "proxy.example.com" } } }),
    /400.*egressProxy.*port is missing/,
  );
});

test("updateNetwork replaces the rules; they survive pause/resume, fork and snapshots", async () => {
  const s = await Sandbox.create();
  try {
    assert.equal(await fetchIn(s, `http://${WEB_B}/`), `web ${WEB_B} host=${WEB_B}`);
    await s.updateNetwork({ denyOut: [WEB_B] });
    assert.equal(await fetchIn(s, `http://${WEB_B}/`), "blocked");
    assert.equal(await fetchIn(s, `http://${WEB_A}/`), `web ${WEB_A} host=${WEB_A}`);
    const info = await s.getInfo();
    assert.deepEqual(info.network?.denyOut, [`${WEB_B}/32`]);

    await s.pause();
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal(await fetchIn(back, `http://${WEB_B}/`), "blocked");

    const [child] = await back.fork();
    assert.ok(child instanceof Sandbox);
    try {
      assert.equal(await fetchIn(child, `http://${WEB_B}/`), "blocked");
    } finally {
      await child.kill();
    }
    const snap = await back.createSnapshot();
    const fromSnap = await Sandbox.create(snap.snapshotId);
    try {
      assert.equal(await fetchIn(fromSnap, `http://${WEB_B}/`), "blocked");
    } finally {
      await fromSnap.kill();
      await Sandbox.deleteSnapshot(snap.snapshotId);
    }
    // Omitted fields are cleared: everything is reachable again.
    await back.updateNetwork({});
    assert.equal(await fetchIn(back, `http://${WEB_B}/`), `web ${WEB_B} host=${WEB_B}`);
    await back.updateNetwork({ allowInternetAccess: false });
    assert.equal(await fetchIn(back, `http://${WEB_A}/`), "blocked");
  } finally {
    await s.kill();
  }
  await assert.rejects(Sandbox.updateNetwork("inowhere0000000000000", {}), /not found/i);
});

test("allowPublicTraffic: false asks every port but envd's for the traffic access token", async () => {
  // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's literal placeholder
  const mask = "masked.example:${PORT}";
  const s = await Sandbox.create({ network: { allowPublicTraffic: false, maskRequestHost: mask } });
  try {
    assert.ok(s.trafficAccessToken, "the create answer carries a traffic token");
    // envd itself stays reachable with its own token: the SDK works.
    await s.commands.run(
      `python3 -c "
import http.server as h
class H(h.BaseHTTPRequestHandler):
  def do_GET(s):
    b=('host=%s token=%s names=%s' % (s.headers.get('Host'), s.headers.get('e2b-traffic-access-token'), ','.join(s.headers.keys()))).encode()
    s.send_response(200);s.send_header('content-length',str(len(b)));s.end_headers();s.wfile.write(b)
h.HTTPServer(('0.0.0.0',8000),H).serve_forever()"`,
      { background: true, timeoutMs: 0 },
    );
    const hostForm = `http://127.0.0.1:${server.port}/`;
    const hostHeader = `8000-${s.sandboxId}.${server.domain}`;
    // node:http, not fetch: fetch will not send a Host header of our choosing.
    const once = (url: string, headers: Record<string, string>) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const r = request(url, { headers }, (res) => {
          let text = "";
          res.on("data", (d: Buffer) => (text += d.toString()));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
        });
        r.on("error", reject);
        r.end();
      });
    const get = async (url: string, headers: Record<string, string>) => {
      for (let i = 0; ; i++) {
        const r = await once(url, headers);
        if (r.status !== 502 || i > 40) return r;
        await new Promise((res) => setTimeout(res, 100));
      }
    };
    const forms: Array<[string, Record<string, string>]> = [
      [hostForm, { host: hostHeader }],
      [`http://127.0.0.1:${server.port}/proxy/${s.sandboxId}/8000/`, {}],
      [hostForm, { "e2b-sandbox-id": s.sandboxId, "e2b-sandbox-port": "8000" }],
    ];
    for (const [url, headers] of forms) {
      const denied = await get(url, headers);
      assert.equal(denied.status, 403, `${url} ${JSON.stringify(headers)}`);
      const body = JSON.parse(denied.text) as { code: number; message: string };
      assert.equal(body.code, 403);
      const wrong = await get(url, { ...headers, "e2b-traffic-access-token": "nope" });
      assert.equal(wrong.status, 403);
      const ok = await get(url, { ...headers, "e2b-traffic-access-token": s.trafficAccessToken as string });
      assert.equal(ok.status, 200);
      // The token is the proxy's, not the sandbox's; the Host is masked. Header names arrive
      // as E2B's proxy sends them (`Host`, `X-Forwarded-For`), whatever case the client used.
      const [head, names] = ok.text.split(" names=");
      assert.equal(head, "host=masked.example:8000 token=None");
      assert.ok(names?.split(",").includes("Host"), names);
      assert.ok(names?.split(",").includes("X-Forwarded-For"), names);
    }
    // WebSocket upgrades are checked too.
    const up = sh(
      `curl -s -o /dev/null -w '%{http_code}' -m 3 -H 'Connection: Upgrade' -H 'Upgrade: websocket' http://127.0.0.1:${server.port}/proxy/${s.sandboxId}/8000/ || true`,
    );
    assert.equal(up, "403");
    // A public sandbox's ports need no token. Its answer carries one all the same: the SDKs
    // send it (and only it) on the code interpreter's context routes, which it authenticates.
    const pub = await Sandbox.create();
    try {
      assert.ok(pub.trafficAccessToken && pub.trafficAccessToken !== s.trafficAccessToken);
      await pub.commands.run("cd /tmp && nohup python3 -m http.server 8001 >/dev/null 2>&1 &");
      let code = "";
      for (let i = 0; i < 50 && code !== "200"; i++) {
        code = sh(
          `curl -s -o /dev/null -w '%{http_code}' -m 3 http://127.0.0.1:${server.port}/proxy/${pub.sandboxId}/8001/ || true`,
        );
        if (code !== "200") await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(code, "200", "a public sandbox's port answers without a token");
    } finally {
      await pub.kill();
    }
  } finally {
    await s.kill();
  }
});

test("rules inject headers, secrets filled in, into HTTPS and HTTP requests; the sandbox never holds the value", async () => {
  const made = await server.api("POST", "/secrets", {
    name: "web-token",
    value: "s3cr3t-value",
    allowedHosts: ["allowed.test"],
  });
  assert.equal(made.status, 201);
  const rules = {
    "allowed.test": [{ transform: { headers: { Authorization: `Bearer ${Secret.fill("web-token")}` } } }],
  };
  const s = await Sandbox.create({ network: { denyOut: ["0.0.0.0/0"], allowOut: ["allowed.test"], rules } });
  try {
    // No -k: the sandbox trusts the node's egress CA, and the proxy checks the real server's.
    const tls = await s.commands.run(`curl -s -m 5 --resolve allowed.test:443:${WEB_B} https://allowed.test/auth`);
    assert.equal(tls.stdout, "auth=Bearer s3cr3t-value");
    const plain = await s.commands.run(`curl -s -m 5 --resolve allowed.test:80:${WEB_A} http://allowed.test/auth`);
    assert.equal(plain.stdout, "auth=Bearer s3cr3t-value");
    // A client's own header is replaced, not added to.
    const own = await s.commands.run(
      `curl -s -m 5 -H 'Authorization: mine' --resolve allowed.test:443:${WEB_A} https://allowed.test/auth`,
    );
    assert.equal(own.stdout, "auth=Bearer s3cr3t-value");
    // Another Host on an intercepted connection is refused, not sent with the secret.
    const other = await s.commands.run(
      `curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Host: other.test' --resolve allowed.test:443:${WEB_A} https://allowed.test/auth`,
    );
    assert.equal(other.stdout, "421");
    const leak = await s.commands.run("env; cat /proc/1/environ 2>/dev/null; true");
    assert.ok(!leak.stdout.includes("s3cr3t-value"));
    assert.ok(!JSON.stringify(await s.getInfo()).includes("s3cr3t-value"));
    // Resolved per request: a rotated secret is used at once.
    await Secret.update("web-token", "rotated-value");
    const rotated = await s.commands.run(`curl -s -m 5 --resolve allowed.test:443:${WEB_A} https://allowed.test/auth`);
    assert.equal(rotated.stdout, "auth=Bearer rotated-value");
    await Secret.destroy("web-token");
    const gone = await s.commands.run(
      `curl -s -o /dev/null -w '%{http_code}' -m 5 --resolve allowed.test:443:${WEB_A} https://allowed.test/auth`,
    );
    assert.equal(gone.stdout, "502");
  } finally {
    await s.kill();
    await Secret.destroy("web-token").catch(() => false);
  }
});

const bearer = (name: string) => [{ transform: { headers: { Authorization: `Bearer ${Secret.fill(name)}` } } }];

test("secrets go only to the hosts they are bound to, and only as valid header values", async () => {
  // Values that are no header value are refused when set: 400 in the E2B shape.
  const nl = await server.api("POST", "/secrets", { name: "nl", value: "a\r\nx-evil: 1", allowedHosts: ["x.test"] });
  assert.equal(nl.status, 400);
  assert.match(JSON.stringify(nl.body), /"code":400.*printable ASCII/);
  const made = await server.api("POST", "/secrets", {
    name: "bound",
    value: "bound-value",
    allowedHosts: ["allowed.test"],
  });
  assert.equal(made.status, 201);
  assert.deepEqual((made.body as { allowedHosts: string[] }).allowedHosts, ["allowed.test"]);
  assert.equal((await server.api("POST", "/secrets/bound", { value: "x\ny" })).status, 400);
  // A rule that would send it to another host is refused when set.
  await Secret.create("sdk-made", "sdk-value");
  for (const rules of [{ "other.test": bearer("bound") }, { "*.test": bearer("bound") }]) {
    const r = await server.api("POST", "/sandboxes", { templateID: "base", network: { rules } });
    assert.equal(r.status, 400, JSON.stringify(rules));
  }
  // Rules naming secrets not made yet pass, and are checked when used.
  const rules = { "other.test": bearer("late"), "allowed.test": bearer("seeded-nl") };
  const s = await Sandbox.create({
    network: { denyOut: ["0.0.0.0/0"], allowOut: ["allowed.test", "other.test"], rules },
  });
  try {
    const upd = await server.api("PUT", `/sandboxes/${s.sandboxId}/network`, {
      rules: { "other.test": bearer("bound") },
    });
    assert.equal(upd.status, 400);
    await server.api("POST", "/secrets", { name: "late", value: "late-value", allowedHosts: ["allowed.test"] });
    const late = await s.commands.run(
      `curl -s -w ' %{http_code}' -m 5 --resolve other.test:443:${WEB_B} https://other.test/auth`,
    );
    assert.match(late.stdout, / 403$/);
    assert.ok(!late.stdout.includes("late-value"));
    // A stored value with a newline: a clean refusal, plain and on a WebSocket handshake.
    const bad = await s.commands.run(
      `curl -s -o /dev/null -w '%{http_code}' -m 5 --resolve allowed.test:443:${WEB_A} https://allowed.test/auth`,
    );
    assert.equal(bad.stdout, "502");
    const ws = await s.commands.run(
      `curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'Connection: Upgrade' -H 'Upgrade: websocket' --resolve allowed.test:80:${WEB_A} http://allowed.test/auth`,
    );
    assert.equal(ws.stdout, "502");
    assert.equal((await server.api("GET", "/secrets/late")).status, 200);
    // A secret with no binding (made through E2B's SDK, which cannot send one) goes, as on E2B,
    // to the host of the rule that names it.
    const sdk = await server.api("PUT", `/sandboxes/${s.sandboxId}/network`, {
      denyOut: ["0.0.0.0/0"],
      allowOut: ["allowed.test"],
      rules: { "allowed.test": bearer("sdk-made") },
    });
    assert.equal(sdk.status, 204, JSON.stringify(sdk.body));
    const filled = await s.commands.run(`curl -s -m 5 --resolve allowed.test:443:${WEB_A} https://allowed.test/auth`);
    assert.equal(filled.stdout, "auth=Bearer sdk-value");
    assert.doesNotMatch(server.logs(), /BUG: uncaught/);
  } finally {
    await s.kill();
    for (const n of ["bound", "sdk-made", "late"]) await Secret.destroy(n).catch(() => false);
  }
});
