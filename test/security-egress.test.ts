// The egress proxy as a way onto the host: code in a sandbox (root there) sends raw requests to
// the proxy's ports or through its redirect, naming one of the host's own addresses (as an IP, as
// a name mapped to one, in proxy and CONNECT form). A host-only web service listens at a
// public-looking host address and at loopback; the operator has opened the always-denied ranges
// (but link-local), so only the host-address rule stands between the sandbox and that service.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createServer, type Server } from "node:http";
import { after, before, test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

const PREFIX = process.env.AENV_TEST_NET_PREFIX ?? "aet";
/** A link holding a host address outside every always-denied range (TEST-NET-2); a veth, as
 * some kernels lack the dummy driver. */
const DUMMY = `${PREFIX}sec0`;
const HOST_ADDR = "198.51.100.77";
const LOOPBACK = "127.77.0.1";
/** Dialled by the sandbox with domain rules: its router redirects port 80 there to the proxy. */
const DIALLED = "192.0.2.1";
let server: TestServer;
const webs: Server[] = [];

function sh(cmd: string): string {
  return execFileSync("sh", ["-c", cmd], { encoding: "utf8" });
}

/** A web service meant for the host alone: it says so, for plain requests and CONNECT tunnels. */
function hostOnly(address: string): Promise<Server> {
  const web = createServer((_req, res) => res.end(`host-only ${address}`));
  web.on("connect", (_req, socket) => {
    socket.on("error", () => socket.destroy());
    socket.write("HTTP/1.1 200 Connection established\r\n\r\n");
    const body = `host-only tunnel ${address}`;
    socket.once("data", () =>
      socket.end(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`),
    );
  });
  return new Promise((resolve, reject) => {
    web.once("error", reject);
    web.listen(80, address, () => resolve(web));
  });
}

before(async () => {
  sh(`ip link delete ${DUMMY} 2>/dev/null; true`);
  sh(
    `ip link add ${DUMMY} type veth peer name ${DUMMY}p && ip addr add ${HOST_ADDR}/32 dev ${DUMMY} && ip link set ${DUMMY} up`,
  );
  webs.push(await hostOnly(HOST_ADDR), await hostOnly(LOOPBACK));
  server = await startServer({
    env: {
      // Only the metadata range stays closed: the host's addresses must be refused on their own.
      AENV_DENIED_RANGES: "169.254.0.0/16",
      AENV_EGRESS_HOSTS: `host.test=${HOST_ADDR},loop.test=${LOOPBACK}`,
    },
  });
  useE2b(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
  await Promise.all(webs.map((w) => new Promise((r) => w.close(r))));
  sh(`ip link delete ${DUMMY} 2>/dev/null; true`);
});

/** The egress proxy's two ports, as the server's host table lets slots reach them (in either order). */
function proxyPorts(): number[] {
  const m = /tcp dport \{ (\d+), (\d+) \}/.exec(sh(`nft list table inet ${PREFIX}-host`));
  assert.ok(m, "the host table names the egress proxy's ports");
  return [Number(m[1]), Number(m[2])];
}

/** What a sandbox gets: the body and status, or "blocked". */
async function fetchIn(s: Sandbox, args: string): Promise<string> {
  const r = await s.commands.run(`curl -s --connect-timeout 2 -m 4 -w ' %{http_code}' ${args} || echo blocked`);
  return r.stdout.trim();
}

/**
 * Collects what each attempt got; `leaks()` lists the ones that reached the host or got anything
 * but a refusal (403 from the proxy, or no connection at all), so a failure names every hole.
 */
function attempts() {
  const wrong: string[] = [];
  return {
    refused(got: string, what: string): void {
      if (/host-only/.test(got) || !/403|blocked/.test(got)) wrong.push(`${what}: ${got}`);
    },
    leaks: () => wrong,
  };
}

/**
 * fetchIn for several attempts at once: each one that is dropped waits out curl's connect
 * timeout, so one after another they took 20 s.
 */
async function fetchAllIn(s: Sandbox, tries: Array<[args: string, what: string]>): Promise<Array<[string, string]>> {
  const jobs = tries.map(
    ([args], i) =>
      `(curl -s --connect-timeout 2 -m 4 -w ' %{http_code}' ${args} || echo blocked) > /tmp/try.${i} 2>&1 &`,
  );
  const r = await s.commands.run(
    `${jobs.join("\n")}\nwait\nfor i in $(seq 0 ${tries.length - 1}); do cat /tmp/try.$i; echo; echo '--'; done`,
  );
  const outs = r.stdout.split("\n--\n");
  return tries.map(([, what], i) => [(outs[i] ?? "").trim(), what]);
}

test("the egress proxy's ports take no connection at another host address", async () => {
  const s = await Sandbox.create();
  const { refused, leaks } = attempts();
  try {
    // nft lists the ports sorted: which is the plain-HTTP one does not matter, both are tried.
    const tries = proxyPorts().flatMap((port): Array<[string, string]> => {
      const at = `${HOST_ADDR}:${port}`;
      return [
        [`-H 'Host: ${HOST_ADDR}' http://${at}/`, `Host: a host address, port ${port}`],
        [`-H 'Host: ${LOOPBACK}' http://${at}/`, `Host: loopback, port ${port}`],
        [`-x http://${at} http://${LOOPBACK}/`, `proxy form, port ${port}`],
        [`-p -x http://${at} http://host.test/`, `CONNECT to a mapped name, port ${port}`],
        [`-k --resolve host.test:${port}:${HOST_ADDR} https://host.test:${port}/`, `TLS, port ${port}`],
      ];
    });
    const got = await fetchAllIn(s, tries);
    assert.equal(got.length, 10);
    for (const [out, what] of got) refused(out, what);
    assert.deepEqual(leaks(), []);
  } finally {
    await s.kill();
  }
});

test("the egress proxy never connects to the host's own addresses, whatever the rules say", async () => {
  const s = await Sandbox.create({ network: { denyOut: ["192.0.2.0/24"], allowOut: ["host.test", "loop.test"] } });
  const { refused, leaks } = attempts();
  try {
    refused(await fetchIn(s, `-H 'Host: ${HOST_ADDR}' http://${DIALLED}/`), "Host: a host address");
    refused(await fetchIn(s, `-H 'Host: ${LOOPBACK}' http://${DIALLED}/`), "Host: loopback");
    refused(await fetchIn(s, `-H 'Host: 0.0.0.0' http://${DIALLED}/`), "Host: 0.0.0.0");
    refused(await fetchIn(s, `--resolve host.test:80:${DIALLED} http://host.test/`), "allowed name of a host address");
    refused(await fetchIn(s, `--resolve loop.test:80:${DIALLED} http://loop.test/`), "allowed name of loopback");
    refused(await fetchIn(s, `-x http://${DIALLED}:80 http://${LOOPBACK}/`), "proxy form");
    refused(await fetchIn(s, `-p -x http://${DIALLED}:80 http://loop.test/`), "CONNECT to an allowed name");
    assert.deepEqual(leaks(), []);
    // The proxy answered (and logged) those refusals itself: the redirect did reach it.
    assert.match(server.logs(), /egress refused: name resolves to no reachable address/);
  } finally {
    await s.kill();
  }
});
