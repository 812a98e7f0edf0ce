// network.egressProxy values (E2B's host:port, plus socks5:// http:// https://) and the
// conntrack lookup the host-side tunnel uses to learn where a redirected connection went.
import assert from "node:assert/strict";
import { test } from "node:test";
import { findOriginalDestination } from "../src/network/conntrack.js";
import { parseProxyAddress, publicEgressProxy, validateEgressProxy } from "../src/network/egress-proxy-config.js";

test("proxy addresses: host:port is SOCKS5; schemes pick SOCKS5, HTTP CONNECT or CONNECT over TLS", () => {
  assert.deepEqual(parseProxyAddress("Proxy.Example.com:1080"), {
    kind: "socks5",
    tls: false,
    host: "proxy.example.com",
    port: 1080,
  });
  assert.deepEqual(parseProxyAddress("http://10.0.0.1:3128"), {
    kind: "http",
    tls: false,
    host: "10.0.0.1",
    port: 3128,
  });
  assert.deepEqual(parseProxyAddress("https://p.example:443/"), {
    kind: "http",
    tls: true,
    host: "p.example",
    port: 443,
  });
  const errors: Array<[string, RegExp]> = [
    ["ftp://p.example:21", /scheme 'ftp'/],
    [":1080", /host is missing/],
    ["socks5://:1080", /host is missing/],
    ["p.example", /port is missing/],
    ["p.example:0", /outside 1-65535/],
    ["p.example:65536", /outside 1-65535/],
    ["p.example:12a", /port is missing/],
    ["[::1]:1080", /IPv6/],
    ["user:pw@p.example:1080", /credentials go in username/],
    ["http://p.example:80/path", /without a path/],
    ["bad_host!:80", /not a host name/],
    ["1.2.3:80", /not a host name/],
  ];
  for (const [address, message] of errors) {
    const r = parseProxyAddress(address);
    assert.ok("error" in r, address);
    assert.match(r.error, message, address);
  }
});

test("egressProxy objects: null is none, credentials are bounded, answers leave out the password", () => {
  assert.equal(validateEgressProxy(null), undefined);
  assert.equal(validateEgressProxy(undefined), undefined);
  const spec = validateEgressProxy({ address: " p.example:1080 ", username: "u", password: "p" });
  assert.deepEqual(spec, { address: "p.example:1080", username: "u", password: "p" });
  assert.deepEqual(publicEgressProxy(spec as NonNullable<typeof spec>), { address: "p.example:1080", username: "u" });
  const bad: Array<[unknown, RegExp]> = [
    ["p.example:1080", /expected an object/],
    [{}, /address is required/],
    [{ address: "p.example:1080", password: "p" }, /password needs a username/],
    [{ address: "p.example:1080", username: "é".repeat(128) }, /longer than 255 bytes/],
    [{ address: "p.example:1080", username: "" }, /username is empty/],
    [{ address: "p.example:1080", username: "u\r\nx: y" }, /line break/],
    [{ address: "p.example:1080", port: 1 }, /port is not a field/],
  ];
  for (const [raw, message] of bad) assert.throws(() => validateEgressProxy(raw), message);
});

test("conntrack: the redirected flow's original destination, by peer and listener port", () => {
  const table = [
    "ipv4     2 tcp      6 117 SYN_SENT src=10.225.0.6 dst=198.51.100.9 sport=40000 dport=8080 [UNREPLIED] src=198.51.100.9 dst=10.225.0.6 sport=8080 dport=40000 mark=0 zone=0 use=2",
    "ipv4     2 tcp      6 431999 ESTABLISHED src=10.225.0.2 dst=198.51.100.201 sport=40000 dport=8080 src=10.225.0.1 dst=10.225.0.2 sport=35111 dport=40000 [ASSURED] mark=0 zone=0 use=2",
    "ipv4     2 udp      17 29 src=10.225.0.2 dst=8.8.8.8 sport=40000 dport=53 src=10.225.0.1 dst=10.225.0.2 sport=35111 dport=40000 mark=0 zone=0 use=2",
  ].join("\n");
  assert.deepEqual(findOriginalDestination(table, { ip: "10.225.0.2", port: 40000 }, 35111), {
    ip: "198.51.100.201",
    port: 8080,
  });
  // Another listener's flow, another peer, or a peer port that only matches as a prefix: none.
  assert.equal(findOriginalDestination(table, { ip: "10.225.0.2", port: 40000 }, 35112), undefined);
  assert.equal(findOriginalDestination(table, { ip: "10.225.0.6", port: 40000 }, 35111), undefined);
  assert.equal(findOriginalDestination(table, { ip: "10.225.0.2", port: 4000 }, 35111), undefined);
});
