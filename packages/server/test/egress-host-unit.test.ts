// The egress proxy never dials the host itself, and takes connections only at the address a
// sandbox's router sends them to. The proxy runs here on loopback with a fake sandbox table.
import assert from "node:assert/strict";
import { connect } from "node:net";
import { test } from "node:test";
import pino from "pino";
import { EgressProxy, type EgressSandbox } from "../src/network/egress-proxy.js";
import { HostAddresses, parseLocalRoutes } from "../src/network/host-addresses.js";
import { compileEgress } from "../src/network/policy.js";

// A host with a link that is down (192.0.2.2: still local to the kernel) and a local range.
const FIB_TRIE = `Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
Local:
  +-- 0.0.0.0/0 3 0 5
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.0.2.0/24 2 0 2
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.2
              /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
     |-- 198.18.7.0
        /24 host LOCAL
`;

test("local routes are read from fib_trie: addresses, local ranges, not broadcasts or routes", () => {
  assert.deepEqual(parseLocalRoutes(FIB_TRIE).sort(), ["127.0.0.0/8", "127.0.0.1/32", "192.0.2.2/32", "198.18.7.0/24"]);
});

test("the host's addresses: local routes, loopback, 0.0.0.0, the slot range, and whatever is not IPv4", () => {
  let now = 0;
  let local = parseLocalRoutes(FIB_TRIE);
  const host = new HostAddresses(
    ["10.211.0.0/16"],
    () => local,
    () => now,
  );
  for (const ip of ["192.0.2.2", "198.18.7.9", "127.9.9.9", "0.0.0.0", "10.211.4.1", "::1", "::ffff:127.0.0.1", "x"]) {
    assert.equal(host.has(ip), true, ip);
  }
  for (const ip of ["192.0.2.1", "203.0.113.10", "10.212.0.1"]) assert.equal(host.has(ip), false, ip);
  // An address added later counts once the table is read again (at most a second on).
  local = [...local, "203.0.113.10/32"];
  now = 1000;
  assert.equal(host.has("203.0.113.10"), true);
});

async function withProxy(sandbox: EgressSandbox, run: (http: number) => Promise<void>): Promise<void> {
  // The operator opened every always-denied range: only the host rule is left.
  const proxy = new EgressProxy({
    log: pino({ level: "silent" }),
    sandboxFor: (ip) => (ip === "127.0.0.1" ? sandbox : undefined),
    denied: [],
    slotCidr: "10.211.0.0/16",
    hosts: { "host.test": ["127.0.0.1"], "slot.test": ["10.211.0.1"], "none.test": [] },
  });
  const { http } = await proxy.listen();
  try {
    await run(http);
  } finally {
    await proxy.close();
  }
}

/** Sends one request head to the proxy and returns all it answered before closing. */
function ask(port: number, head: string): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host: "127.0.0.1", port });
    let got = "";
    s.on("data", (d: Buffer) => (got += d.toString("latin1")));
    s.on("error", () => undefined);
    s.on("close", () => resolve(got));
    s.write(head);
  });
}

const sandbox = (hostIp: string): EgressSandbox => ({
  id: "sbx",
  hostIp,
  policy: compileEgress({ allowOut: ["host.test", "slot.test"] }, true),
  spec: undefined,
});

test("the egress proxy refuses the host's own addresses by IP and by an allowed name", async () => {
  await withProxy(sandbox("127.0.0.1"), async (http) => {
    for (const host of ["127.0.0.1", "0.0.0.0", "host.test", "slot.test", "10.211.0.1"]) {
      const got = await ask(http, `GET / HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
      assert.match(got, /^HTTP\/1\.1 403 /, host);
    }
  });
});

test("the egress proxy takes a sandbox's connections only at its slot link's host end", async () => {
  // The connection arrives at 127.0.0.1, not at the 10.211.0.1 this sandbox's router uses.
  await withProxy(sandbox("10.211.0.1"), async (http) => {
    assert.equal(await ask(http, "GET / HTTP/1.1\r\nHost: none.test\r\n\r\n"), "");
  });
});
