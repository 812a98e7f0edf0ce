// network.egressProxy: a sandbox's allowed TCP leaves through the user's own SOCKS5 or HTTP
// CONNECT proxy (here: Node proxies on loopback that send everything to one local target),
// deny rules first, credentials only on the host. The test's addresses (TEST-NET-2) are
// blackholed on the host: a connection that bypassed the proxy would go nowhere.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type RequestListener, type Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { connectProxy, socks5Proxy, type TestProxy } from "./helpers/proxies.js";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

const NET = "198.51.100.200/30";
const BY_IP = "198.51.100.201";
const DIALLED = "198.51.100.202";
const DENIED = "198.51.100.203";
const USER = "proxy-user";
const PASS = `pw-${randomBytes(12).toString("hex")}`;
const certDir = mkdtempSync("/tmp/aeep-cert-");
let server: TestServer;
let target: Server;
let tlsTarget: Server;
let socks: TestProxy;
let http: TestProxy;
let https: TestProxy;
/** On a loopback address outside network.egress_proxy_allowed. */
let notAllowed: TestProxy;

function sh(cmd: string): string {
  return execFileSync("sh", ["-c", cmd], { encoding: "utf8" });
}

before(async () => {
  sh(`ip route replace blackhole ${NET}`);
  sh(
    `openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1,DNS:target.test -keyout ${certDir}/key.pem -out ${certDir}/cert.pem 2>/dev/null`,
  );
  const tls = { key: readFileSync(`${certDir}/key.pem`, "utf8"), cert: readFileSync(`${certDir}/cert.pem`, "utf8") };
  // The target: its Host, and the header network rules inject on /hdr. Port 443 is asked for TLS.
  const answer: RequestListener = (req, res) =>
    res.end(req.url === "/hdr" ? `x-injected=${req.headers["x-injected"]}` : `target host=${req.headers.host}`);
  target = createServer(answer).listen(0, "127.0.0.1");
  tlsTarget = createHttpsServer(tls, answer).listen(0, "127.0.0.1");
  await Promise.all([once(target, "listening"), once(tlsTarget, "listening")]);
  const portOf = (s: Server) => (s.address() as { port: number }).port;
  const targetFor = (port: number) => (port === 443 ? portOf(tlsTarget) : portOf(target));
  socks = await socks5Proxy(USER, PASS, targetFor);
  http = await connectProxy(USER, PASS, targetFor);
  https = await connectProxy(USER, PASS, targetFor, tls);
  notAllowed = await socks5Proxy(USER, PASS, targetFor, "127.0.0.2");
  server = await startServer({
    env: {
      AENV_EGRESS_HOSTS: `target.test=${BY_IP}`,
      // The proxies are on the host's loopback: the operator allows proxies there.
      AENV_EGRESS_PROXY_ALLOWED: "127.0.0.1/32",
      // The TLS proxy's and the TLS target's self-signed certificate.
      AENV_EGRESS_UPSTREAM_CA_FILE: `${certDir}/cert.pem`,
    },
  });
  useE2b(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
  await Promise.all([socks?.close(), http?.close(), https?.close(), notAllowed?.close()]);
  target?.close();
  tlsTarget?.close();
  sh(`ip route del blackhole ${NET} 2>/dev/null; true`);
  rmSync(certDir, { recursive: true, force: true });
});

async function fetchIn(s: Sandbox, args: string): Promise<string> {
  const r = await s.commands.run(`curl -s --connect-timeout 3 -m 6 ${args} || echo blocked`);
  return r.stdout.trim();
}

const proxyAt = (p: TestProxy, scheme = "") => `${scheme}127.0.0.1:${p.port}`;

test("SOCKS5: allowed traffic goes through the proxy with its credentials; denied never reaches it", async () => {
  const s = await Sandbox.create({
    network: { denyOut: [`${DENIED}/32`], egressProxy: { address: proxyAt(socks), username: USER, password: PASS } },
  });
  try {
    assert.equal(await fetchIn(s, `http://${BY_IP}:8080/`), `target host=${BY_IP}:8080`);
    assert.deepEqual(socks.seen.at(-1), { target: `${BY_IP}:8080`, authOk: true, user: USER });
    const before = socks.seen.length;
    assert.equal(await fetchIn(s, `http://${DENIED}:8080/`), "blocked");
    assert.equal(socks.seen.length, before, "the proxy saw a denied destination");
    assert.ok(!socks.seen.some((x) => x.target.startsWith(DENIED)));
  } finally {
    await s.kill();
  }
});

test("SOCKS5: an allowed domain goes to the proxy by name (remote DNS)", async () => {
  const s = await Sandbox.create({
    network: {
      denyOut: ["0.0.0.0/0"],
      allowOut: ["target.test"],
      egressProxy: { address: `socks5://127.0.0.1:${socks.port}`, username: USER, password: PASS },
    },
  });
  try {
    assert.equal(
      await fetchIn(s, `--resolve target.test:80:${DIALLED} http://target.test/`),
      "target host=target.test",
    );
    assert.deepEqual(socks.seen.at(-1), { target: "target.test:80", authOk: true, user: USER });
    // Not allowed by name or address: dropped before any proxy.
    const before = socks.seen.length;
    assert.equal(await fetchIn(s, `http://${BY_IP}:8080/`), "blocked");
    assert.equal(socks.seen.length, before);
  } finally {
    await s.kill();
  }
});

test("HTTP CONNECT, plain and over TLS to the proxy", async () => {
  for (const [p, scheme] of [
    [http, "http://"],
    [https, "https://"],
  ] as const) {
    const s = await Sandbox.create({
      network: { egressProxy: { address: proxyAt(p, scheme), username: USER, password: PASS } },
    });
    try {
      assert.equal(await fetchIn(s, `http://${BY_IP}:8081/x`), `target host=${BY_IP}:8081`, scheme);
      assert.deepEqual(p.seen.at(-1), { target: `${BY_IP}:8081`, authOk: true, user: USER });
    } finally {
      await s.kill();
    }
  }
});

test("wrong proxy credentials fail the connection (no direct fallback)", async () => {
  for (const [p, scheme] of [
    [socks, ""],
    [http, "http://"],
  ] as const) {
    const s = await Sandbox.create({
      network: { egressProxy: { address: proxyAt(p, scheme), username: USER, password: "wrong" } },
    });
    try {
      assert.equal(await fetchIn(s, `http://${BY_IP}:8080/`), "blocked", scheme);
      assert.equal(p.seen.at(-1)?.authOk, false);
    } finally {
      await s.kill();
    }
  }
});

test("network rules still apply: headers are injected, then the request goes through the proxy", async () => {
  const s = await Sandbox.create({
    network: {
      denyOut: ["0.0.0.0/0"],
      allowOut: ["target.test"],
      rules: { "target.test": [{ transform: { headers: { "x-injected": "yes" } } }] },
      egressProxy: { address: proxyAt(http, "http://"), username: USER, password: PASS },
    },
  });
  try {
    for (const [url, port] of [
      ["http://target.test/hdr", 80],
      ["https://target.test/hdr", 443],
    ] as const) {
      const resolve = `--resolve target.test:${port}:${DIALLED}`;
      assert.equal(await fetchIn(s, `${resolve} ${url}`), "x-injected=yes", url);
      assert.deepEqual(http.seen.at(-1), { target: `target.test:${port}`, authOk: true, user: USER });
    }
  } finally {
    await s.kill();
  }
});

test("updateNetwork sets and clears the proxy of a running sandbox", async () => {
  const s = await Sandbox.create();
  try {
    // Without a proxy the destination is blackholed on the host.
    assert.equal(await fetchIn(s, `http://${BY_IP}:8082/`), "blocked");
    await s.updateNetwork({ egressProxy: { address: proxyAt(socks), username: USER, password: PASS } });
    assert.equal(await fetchIn(s, `http://${BY_IP}:8082/`), `target host=${BY_IP}:8082`);
    assert.deepEqual(socks.seen.at(-1), { target: `${BY_IP}:8082`, authOk: true, user: USER });
    assert.deepEqual((await s.getInfo()).network?.egressProxy, { address: proxyAt(socks), username: USER });
    // An update without it stops tunnelling (E2B: omitted fields are cleared).
    await s.updateNetwork({});
    const before = socks.seen.length;
    assert.equal(await fetchIn(s, `http://${BY_IP}:8082/`), "blocked");
    assert.equal(socks.seen.length, before);
  } finally {
    await s.kill();
  }
});

test("the proxy stays in force across pause and resume", async () => {
  const s = await Sandbox.create({
    network: { egressProxy: { address: proxyAt(socks), username: USER, password: PASS } },
  });
  try {
    await s.pause();
    const back = await Sandbox.connect(s.sandboxId);
    assert.equal(await fetchIn(back, `http://${BY_IP}:8083/`), `target host=${BY_IP}:8083`);
    assert.deepEqual(socks.seen.at(-1), { target: `${BY_IP}:8083`, authOk: true, user: USER });
  } finally {
    await s.kill();
  }
});

test("a proxy at a host address outside network.egress_proxy_allowed is never dialled", async () => {
  const s = await Sandbox.create({
    network: { egressProxy: { address: `127.0.0.2:${notAllowed.port}`, username: USER, password: PASS } },
  });
  try {
    assert.equal(await fetchIn(s, `http://${BY_IP}:8080/`), "blocked");
    assert.equal(notAllowed.seen.length, 0);
  } finally {
    await s.kill();
  }
});

test("the proxy's credentials are not in the sandbox nor in API answers", async () => {
  const s = await Sandbox.create({
    network: { egressProxy: { address: proxyAt(socks), username: USER, password: PASS } },
  });
  try {
    assert.equal(await fetchIn(s, `http://${BY_IP}:8080/`), `target host=${BY_IP}:8080`);
    // The command carries the password base64-encoded, so that its own command line (read
    // from /proc first) does not hold it; the dump then lies in /tmp, which is searched too.
    const b64 = Buffer.from(PASS).toString("base64");
    const r = await s.commands.run(
      `(cat /proc/*/environ /proc/*/cmdline; env) 2>/dev/null | tr "\\0" "\\n" > /tmp/dump; P=$(echo ${b64} | base64 -d); grep -rIlF -e "$P" /etc /root /home /tmp /run /var /opt /usr/local 2>/dev/null | wc -l`,
    );
    assert.equal(r.stdout.trim(), "0");
    const info = await server.api("GET", `/sandboxes/${s.sandboxId}`);
    assert.ok(!JSON.stringify(info.body).includes(PASS));
    assert.deepEqual((info.body as { network: { egressProxy: unknown } }).network.egressProxy, {
      address: proxyAt(socks),
      username: USER,
    });
  } finally {
    await s.kill();
  }
});

test("bad egressProxy values and the envd port in httpsPorts are 400s with a message; iam tokens a 501", async () => {
  const cases: Array<[unknown, RegExp]> = [
    [{ address: "ftp://proxy.example.com:21" }, /scheme 'ftp'/],
    [{ address: ":1080" }, /host is missing/],
    [{ address: "proxy.example.com" }, /port is missing/],
    [{ address: "proxy.example.com:70000" }, /outside 1-65535/],
    [{ address: "u:p@proxy.example.com:1080" }, /credentials go in username/],
    [{ address: "proxy.example.com:1080", password: "x" }, /password needs a username/],
    [{ address: "proxy.example.com:1080", username: "u".repeat(256) }, /longer than 255 bytes/],
    [{ username: "u" }, /address is required/],
  ];
  for (const [egressProxy, message] of cases) {
    const r = await server.api("POST", "/sandboxes", { templateID: "base", network: { egressProxy } });
    assert.equal(r.status, 400, JSON.stringify(egressProxy));
    const body = r.body as { code: number; message: string };
    assert.equal(body.code, 400);
    assert.match(body.message, message);
  }
  const refused: Array<[Record<string, unknown>, number, RegExp]> = [
    [{ network: { httpsPorts: [49983] } }, 400, /httpsPorts: the envd port/],
    [
      { iam: { tokens: { aws: { audience: "sts.amazonaws.com", tokenType: "JWT-SVID" } } } },
      501,
      /iam: workload identity tokens are not offered/,
    ],
    [
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder syntax in a rule, not a template
      { network: { rules: { "example.com": [{ transform: { headers: { A: "${e2b.identity.tokens.aws}" } } }] } } },
      501,
      /workload identity tokens \(iam\) are not offered/,
    ],
  ];
  for (const [extra, status, message] of refused) {
    const r = await server.api("POST", "/sandboxes", { templateID: "base", ...extra });
    assert.equal(r.status, status, JSON.stringify(extra));
    assert.match((r.body as { message: string }).message, message);
  }
});
