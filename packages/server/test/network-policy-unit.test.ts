import assert from "node:assert/strict";
import { test } from "node:test";
import { parseClientHelloSni, parseHttpHost } from "../src/network/client-hello.js";
import {
  compileEgress,
  domainMatches,
  inCidrs,
  normaliseCidr,
  parseDestination,
  rulesFor,
  validateNetworkSpec,
} from "../src/network/policy.js";
import { routerTable } from "../src/network/router-rules.js";

test("destinations: CIDRs lose host bits, domains are lowercased, garbage is refused", () => {
  assert.equal(normaliseCidr("10.1.2.3/8"), "10.0.0.0/8");
  assert.equal(normaliseCidr("8.8.8.8"), "8.8.8.8/32");
  assert.equal(normaliseCidr("1.2.3.4/33"), undefined);
  assert.deepEqual(parseDestination("*.Example.COM"), { kind: "domain", pattern: "*.example.com" });
  assert.deepEqual(parseDestination("2001:db8::/32"), { kind: "ipv6" });
  for (const bad of ["*", "*.", "a..b", "-a.com", "1.2.3", "x/y", "", "a b.com", "*.*.com"]) {
    assert.equal(parseDestination(bad), undefined, bad);
  }
});

test("wildcards match subdomains at any depth, not the apex; exact rules win over wildcards", () => {
  assert.ok(domainMatches("*.example.com", "a.b.example.com"));
  assert.ok(!domainMatches("*.example.com", "example.com"));
  assert.ok(!domainMatches("*.example.com", "badexample.com"));
  assert.ok(domainMatches("example.com", "EXAMPLE.com."));
  const rules = { "*.example.com": [{ transform: { headers: { a: "1" } } }], "api.example.com": [] };
  assert.deepEqual(rulesFor(rules, "api.example.com"), []);
  assert.equal(rulesFor(rules, "x.api.example.com")?.length, 1);
  assert.equal(rulesFor(rules, "example.org"), undefined);
});

test("validation refuses what is not enforced and deny rules by name", () => {
  assert.throws(() => validateNetworkSpec({ denyOut: ["example.com"] }), /domain names are not supported/);
  assert.throws(() => validateNetworkSpec({ egressProxy: { address: "p.example" } }), /egressProxy.*port is missing/);
  assert.throws(() => validateNetworkSpec({ httpsPorts: [8443, 49983] }), /httpsPorts: the envd port/);
  assert.deepEqual(validateNetworkSpec({ httpsPorts: [8443, 443, 8443] }), { httpsPorts: [443, 8443] });
  assert.throws(() => validateNetworkSpec({ rules: { "a.com": [{ transform: { headers: { "bad header": "x" } } }] } }));
  assert.throws(() => validateNetworkSpec({ maskRequestHost: "a\r\nb" }));
  assert.deepEqual(validateNetworkSpec({ allowOut: ["1.2.3.4", "A.com"] }), { allowOut: ["1.2.3.4/32", "a.com"] });
});

test("allow_internet_access: false is denyOut 0.0.0.0/0", () => {
  assert.deepEqual(compileEgress(undefined, false).denyCidrs, ["0.0.0.0/0"]);
  assert.deepEqual(compileEgress({ allowOut: ["x.com", "1.1.1.1/32"] }, true), {
    allowCidrs: ["1.1.1.1/32"],
    denyCidrs: [],
    allowDomains: ["x.com"],
    ruleDomains: [],
    tunnel: false,
  });
  assert.equal(compileEgress({ egressProxy: { address: "p.example:1080" } }, true).tunnel, true);
  assert.ok(inCidrs("10.9.8.7", ["10.0.0.0/8"]));
  assert.ok(!inCidrs("11.0.0.1", ["10.0.0.0/8"]));
  assert.ok(inCidrs("1.2.3.4", ["0.0.0.0/0"]));
});

test("router table: always-denied before allow, DNS only when something is reachable, proxy only with domains", () => {
  const guard = { denied: ["10.0.0.0/8"], resolvers: ["10.255.255.53"], proxyPorts: { http: 4000, tls: 4001 } };
  const closed = routerTable("10.202.0.0/16", "10.202.0.1", compileEgress(undefined, false), guard);
  assert.ok(!closed.includes("th dport 53 accept"));
  assert.ok(!closed.includes("dnat to 10.202.0.1"));
  const t = routerTable(
    "10.202.0.0/16",
    "10.202.0.1",
    compileEgress({ denyOut: ["0.0.0.0/0"], allowOut: ["a.com", "8.8.8.8"] }, true),
    guard,
  );
  const at = (s: string) => t.indexOf(s);
  assert.ok(at("th dport 53 accept") < at("{ 10.0.0.0/8 } drop"));
  assert.ok(at("{ 10.0.0.0/8 } drop") < at("{ 8.8.8.8/32 } accept"));
  assert.ok(at("{ 8.8.8.8/32 } accept") < at("{ 0.0.0.0/0 } drop"));
  assert.ok(t.includes("tcp dport 443 dnat to 10.202.0.1:4001"));
});

test("SNI and Host are read from the first bytes, and need all of them", () => {
  // A minimal ClientHello for "a.test" (one record).
  const name = Buffer.from("a.test");
  const sni = Buffer.concat([
    Buffer.from([0, 0]), // extension type server_name
    u16(name.length + 5),
    u16(name.length + 3),
    Buffer.from([0]),
    u16(name.length),
    name,
  ]);
  const body = Buffer.concat([
    Buffer.from([3, 3]),
    Buffer.alloc(32),
    Buffer.from([0]),
    u16(2),
    Buffer.from([0x13, 0x01]),
    Buffer.from([1, 0]),
    u16(sni.length),
    sni,
  ]);
  const hs = Buffer.concat([Buffer.from([1]), Buffer.from([0, 0, body.length]), body]);
  const rec = Buffer.concat([Buffer.from([22, 3, 1]), u16(hs.length), hs]);
  assert.equal(parseClientHelloSni(rec), "a.test");
  assert.equal(parseClientHelloSni(rec.subarray(0, 20)), undefined);
  assert.equal(parseClientHelloSni(Buffer.from("GET / HTTP/1.1\r\n")), null);
  assert.equal(parseHttpHost(Buffer.from("GET / HTTP/1.1\r\nHost: x.test:80\r\n\r\n")), "x.test");
  assert.equal(parseHttpHost(Buffer.from("GET / HTTP/1.1\r\nHost: x.test")), undefined);
  assert.equal(parseHttpHost(Buffer.from("GET / HTTP/1.1\r\n\r\n")), null);
});

function u16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
}
