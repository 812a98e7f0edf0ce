// Secrets in the egress proxy's header rules: sent to the hosts of the rules that name them (as
// on E2B) or, when bound, only to the hosts they are bound to; validated as header values, at
// creation and again at use. The rewriter is driven over real
// sockets; "upstream" is a listener on a loopback address of this test's own, port 80.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { connect, createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { InvalidRequestError } from "@aenv/edge/errors";
import { NewSecret, SecretUpdate } from "@aenv/protocol/rest";
import pino from "pino";
import type { EgressCa } from "../src/network/egress-ca.js";
import { HeaderRewriter } from "../src/network/egress-rewriter.js";
import type { NetworkSpec } from "../src/network/policy.js";
import { checkRuleBindings, patternCovered } from "../src/secrets/binding.js";
import { SecretStore } from "../src/secrets/store.js";

const UPSTREAM = `127.${10 + Math.floor(Math.random() * 200)}.${Math.floor(Math.random() * 250)}.9`;
const dir = mkdtempSync("/tmp/aenv-egress-secrets-");
let upstream: Server;
/** Every byte upstream received, per connection. */
const received: string[] = [];

before(async () => {
  upstream = createServer((s) => {
    const i = received.push("") - 1;
    s.on("data", (d: Buffer) => {
      received[i] += d.toString("latin1");
      if (received[i]?.includes("\r\n\r\n"))
        s.end("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
    });
    s.on("error", () => {});
  });
  await new Promise<void>((r) => upstream.listen(80, UPSTREAM, r));
});

after(() => {
  upstream.close();
  rmSync(dir, { recursive: true, force: true });
});

function uncaughtGuard(): () => void {
  const seen: unknown[] = [];
  const on = (e: unknown) => seen.push(e);
  process.on("uncaughtException", on);
  return () => {
    process.off("uncaughtException", on);
    assert.deepEqual(seen, [], "the rewriter threw an uncaught exception");
  };
}

/** One request through the rewriter as a sandbox's connection to `host`; the raw answer. */
async function through(rw: HeaderRewriter, host: string, spec: NetworkSpec, request: string): Promise<string> {
  const front = createServer((socket) => {
    rw.handle({
      socket,
      head: Buffer.alloc(0),
      tls: false,
      host,
      sandbox: {
        id: "sbx_test",
        policy: { allowCidrs: [], denyCidrs: [], allowDomains: [], ruleDomains: [], tunnel: false },
        spec,
        hostIp: "127.0.0.1",
      },
      addresses: [UPSTREAM],
    });
  });
  await new Promise<void>((r) => front.listen(0, "127.0.0.1", r));
  const port = (front.address() as { port: number }).port;
  try {
    return await new Promise<string>((resolve) => {
      const c = connect(port, "127.0.0.1", () => c.write(request));
      let out = "";
      c.on("data", (d: Buffer) => {
        out += d.toString("latin1");
      });
      c.on("close", () => resolve(out));
      c.on("error", () => resolve(out));
      setTimeout(() => c.destroy(), 3000);
    });
  } finally {
    front.close();
  }
}

const rule = (host: string, name: string): NetworkSpec => ({
  rules: { [host]: [{ transform: { headers: { authorization: `Bearer \${e2b.secrets.${name}}` } } }] },
});

test("a secret's value must be a header value and its hosts domains, at creation and update", async () => {
  for (const value of ["a\nb", "a\r\nx-evil: 1", "nul\0", "ключ"]) {
    assert.equal(NewSecret.safeParse({ name: "n", value }).success, false, JSON.stringify(value));
    assert.equal(SecretUpdate.safeParse({ value }).success, false, JSON.stringify(value));
  }
  mkdirSync(join(dir, "validate"), { recursive: true });
  const store = await SecretStore.inFolder(join(dir, "validate"));
  await assert.rejects(store.create("n", "a\nb", {}, undefined, undefined), InvalidRequestError);
  await assert.rejects(store.create("n", "ok", {}, ["https://x.test/"], undefined), InvalidRequestError);
  const info = await store.create("n", "ok", {}, ["API.Test.", "*.cdn.test"], undefined);
  assert.deepEqual(info.allowedHosts, ["api.test", "*.cdn.test"]);
  await assert.rejects(store.update("n", {}, "bad\r\n"), InvalidRequestError);
  assert.deepEqual((await store.update("n", {}, "new", undefined, ["other.test"])).allowedHosts, ["other.test"]);
  assert.deepEqual((await store.update("n", {}, "newer")).allowedHosts, ["other.test"]);
});

test("rules may name a bound secret only for hosts it is bound to (400 when set)", async () => {
  const sub = join(dir, "rules");
  mkdirSync(sub);
  const store = await SecretStore.inFolder(sub);
  await store.create("bound", "v", {}, ["api.test", "*.cdn.test"], undefined);
  await store.create("unbound", "v", {}, undefined, undefined);
  const bindingOf = (n: string) => store.bindingOf(n, undefined);
  // No binding: the rule's host is where it goes, as on E2B.
  checkRuleBindings(rule("api.test", "unbound").rules, bindingOf);
  checkRuleBindings(rule("*.anything.test", "unbound").rules, bindingOf);
  // Unless the operator requires one.
  const strict = await SecretStore.inFolder(sub, { requireBinding: true });
  assert.throws(
    () => checkRuleBindings(rule("api.test", "unbound").rules, (n) => strict.bindingOf(n, undefined)),
    /not bound to any host, which this server requires/,
  );
  checkRuleBindings(rule("api.test", "bound").rules, (n) => strict.bindingOf(n, undefined));
  checkRuleBindings(rule("api.test", "bound").rules, bindingOf);
  checkRuleBindings(rule("a.b.cdn.test", "bound").rules, bindingOf);
  checkRuleBindings(rule("*.x.cdn.test", "bound").rules, bindingOf);
  // Not made yet: checked when used.
  checkRuleBindings(rule("evil.test", "later").rules, bindingOf);
  for (const [host, name] of [
    ["evil.test", "bound"],
    ["*.test", "bound"],
    ["cdn.test", "bound"],
    ["api.test.evil.test", "bound"],
  ] as const) {
    assert.throws(() => checkRuleBindings(rule(host, name).rules, bindingOf), InvalidRequestError, `${host} ${name}`);
  }
  assert.ok(patternCovered(["*.cdn.test"], "*.cdn.test"));
  assert.ok(!patternCovered(["a.cdn.test"], "*.cdn.test"));
});

test("the egress proxy fills a secret in only for its hosts, and refuses bad values cleanly", async () => {
  const sub = join(dir, "use");
  mkdirSync(sub);
  // Stored with no allowedHosts, and one stored before value checks existed, with a newline.
  writeFileSync(
    join(sub, "secrets.json"),
    JSON.stringify([
      { id: "sec_a", name: "legacy", value: "old-value", version: 1, metadata: {}, createdAt: 1, updatedAt: 1 },
      {
        id: "sec_b",
        name: "newline",
        value: "x\r\nx-injected: 1",
        version: 1,
        metadata: {},
        allowedHosts: ["api.test"],
        createdAt: 2,
        updatedAt: 2,
      },
    ]),
  );
  const store = await SecretStore.inFolder(sub);
  await store.create("token", "s3cr3t", {}, ["api.test"], undefined);
  const rewriter = (s: SecretStore) =>
    new HeaderRewriter({
      ca: {} as EgressCa,
      secret: (name, host, owner) => s.use(name, host, owner),
      log: pino({ level: "silent" }),
    });
  const rw = rewriter(store);
  const strict = rewriter(await SecretStore.inFolder(sub, { requireBinding: true }));
  const get = (host: string) => `GET /x HTTP/1.1\r\nhost: ${host}\r\nconnection: close\r\n\r\n`;
  const ws = (host: string) =>
    `GET /ws HTTP/1.1\r\nhost: ${host}\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`;
  const check = uncaughtGuard();
  try {
    // The bound host gets it.
    const ok = await through(rw, "api.test", rule("api.test", "token"), get("api.test"));
    assert.match(ok, /^HTTP\/1\.1 200/);
    assert.ok(received.some((r) => r.includes("authorization: Bearer s3cr3t")));
    // A rule made before the secret (so never checked against its binding) for another host.
    const n = received.length;
    const evil = await through(rw, "evil.test", rule("evil.test", "token"), get("evil.test"));
    assert.match(evil, /^HTTP\/1\.1 403/);
    const evilWs = await through(rw, "evil.test", rule("evil.test", "token"), ws("evil.test"));
    assert.match(evilWs, /^HTTP\/1\.1 403/);
    // No allowedHosts and a binding required: sent nowhere.
    assert.match(await through(strict, "api.test", rule("api.test", "legacy"), get("api.test")), /^HTTP\/1\.1 403/);
    // A stored value that is no header value: a clean 502, plain and on a WebSocket handshake.
    assert.match(await through(rw, "api.test", rule("api.test", "newline"), get("api.test")), /^HTTP\/1\.1 502/);
    assert.match(await through(rw, "api.test", rule("api.test", "newline"), ws("api.test")), /^HTTP\/1\.1 502/);
    // A rule header node:http cannot send (set before rule values were checked as such).
    const badRule: NetworkSpec = { rules: { "api.test": [{ transform: { headers: { "x-a": "é€" } } }] } };
    assert.match(await through(rw, "api.test", badRule, get("api.test")), /^HTTP\/1\.1 502/);
    assert.equal(received.length, n, "nothing refused reached upstream");
    assert.ok(!received.join("").includes("old-value") && !received.join("").includes("x-injected"));
    // No allowedHosts, by default: filled in for the host of the rule that names it.
    assert.match(await through(rw, "api.test", rule("api.test", "legacy"), get("api.test")), /^HTTP\/1\.1 200/);
    assert.ok(received.at(-1)?.includes("authorization: Bearer old-value"));
  } finally {
    check();
  }
});
