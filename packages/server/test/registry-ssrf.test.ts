// Image pulls are requests from the server to an address an API caller (or the registry, by
// its redirects and token realms) chooses. Loopback/private/link-local addresses are reached
// only with the operator's setting; metadata addresses never; names are checked as the
// connection resolves them. Two listeners on loopback stand in: 127.0.0.1 "the registry"
// and 127.0.0.2 "a service on the server's network" (tests class 127.0.0.1 as public).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type ImagePullError, ImageStore, parseReference } from "../src/storage/images/index.js";
import { RegistryClient } from "../src/storage/images/registry-client.js";
import { classifyAddress, RegistryNet } from "../src/storage/images/registry-net.js";

const root = mkdtempSync("/var/tmp/aenv-ssrf-");
const MANIFEST = JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json" });
let registry: Server;
let inside: Server;
let reg = "";
let insidePort = 0;
/** Requests each listener got. */
const hits = { registry: [] as string[], inside: [] as string[] };

async function listen(s: Server, host: string): Promise<number> {
  await new Promise<void>((r) => s.listen(0, host, r));
  return (s.address() as AddressInfo).port;
}

before(async () => {
  registry = createServer((req, res) => {
    const url = req.url ?? "";
    hits.registry.push(url);
    res.setHeader("connection", "close");
    const repo = /^\/v2\/t\/([a-z-]+)\//.exec(url)?.[1];
    const inner = `http://127.0.0.2:${insidePort}`;
    if (repo === "redirect-meta") return res.writeHead(307, { location: "http://169.254.169.254/latest/" }).end();
    if (repo === "redirect-mapped") return res.writeHead(307, { location: "http://[::ffff:a9fe:a9fe]/" }).end();
    if (repo === "redirect-private") return res.writeHead(307, { location: `${inner}/v2/t/ok/manifests/latest` }).end();
    const realm =
      repo === "realm-meta" ? "http://169.254.169.254/token" : repo === "realm-private" ? `${inner}/token` : "";
    if (realm) return res.writeHead(401, { "www-authenticate": `Bearer realm="${realm}",service="x"` }).end();
    res.writeHead(200, { "content-type": "application/vnd.oci.image.manifest.v1+json" }).end(MANIFEST);
  });
  inside = createServer((req, res) => {
    hits.inside.push(req.url ?? "");
    res.writeHead(200, { "content-type": "application/json", connection: "close" }).end('{"token":"t"}');
  });
  reg = `127.0.0.1:${await listen(registry, "127.0.0.1")}`;
  insidePort = await listen(inside, "127.0.0.2");
});

after(() => {
  registry.close();
  inside.close();
  rmSync(root, { recursive: true, force: true });
});

const refused = (code: string) => (e: ImagePullError) => {
  assert.equal(e.code, code, e.message);
  return true;
};
/** 127.0.0.1 plays a public registry; every other address is classed as it really is. */
const asPublic = (a: string) => (a === "127.0.0.1" ? "public" : classifyAddress(a));
const client = (repo: string, net: RegistryNet, host = reg) =>
  new RegistryClient(parseReference(`${host}/t/${repo}:latest`), { net, insecureRegistries: [host] });

test("addresses: metadata in every spelling, private ranges, public ones", () => {
  for (const a of [
    "169.254.169.254",
    "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",
    "fd00:ec2::254",
    "100.100.100.200",
  ]) {
    assert.equal(classifyAddress(a), "metadata", a);
  }
  for (const a of [
    "127.0.0.1",
    "10.1.2.3",
    "172.20.0.1",
    "192.168.1.1",
    "0.0.0.0",
    "::1",
    "::",
    "fe80::1%eth0",
    "fc00::1",
    "::ffff:10.0.0.1",
  ]) {
    assert.equal(classifyAddress(a), "private", a);
  }
  for (const a of ["8.8.8.8", "203.0.113.9", "2606:4700::1111"]) assert.equal(classifyAddress(a), "public", a);
});

test("by default a pull from a loopback registry, by address or by name, sends nothing", async () => {
  const store = new ImageStore({ dir: join(root, "default"), authFile: join(root, "none.json") });
  const before = hits.registry.length;
  const port = reg.split(":")[1];
  for (const ref of [`${reg}/t/ok:latest`, `localhost:${port}/t/ok:latest`, `[::1]:${port}/t/ok:latest`]) {
    await assert.rejects(store.pull(ref), refused("forbidden-address"), ref);
  }
  assert.equal(hits.registry.length, before);
});

test("the operator's setting lets loopback registries through, never metadata redirects or realms", async () => {
  const net = new RegistryNet({ allowPrivate: true });
  assert.equal((await client("ok", net).getManifest("latest")).bytes.toString(), MANIFEST);
  for (const repo of ["redirect-meta", "redirect-mapped", "realm-meta"]) {
    await assert.rejects(client(repo, net).getManifest("latest"), refused("forbidden-address"), repo);
  }
});

test("redirects and token realms to private addresses are refused without the setting", async () => {
  const net = new RegistryNet({ classify: asPublic });
  assert.equal((await client("ok", net).getManifest("latest")).bytes.toString(), MANIFEST);
  for (const repo of ["redirect-private", "realm-private"]) {
    await assert.rejects(client(repo, net).getManifest("latest"), refused("forbidden-address"), repo);
  }
  assert.deepEqual(hits.inside, []);
  // With it, the same hops are followed.
  const allowed = new RegistryNet({ classify: asPublic, allowPrivate: true });
  assert.equal((await client("redirect-private", allowed).getManifest("latest")).bytes.toString(), '{"token":"t"}');
  assert.equal(hits.inside.length, 1);
  hits.inside.length = 0;
});

test("a name is checked as the connection resolves it: a rebinding answer reaches nothing", async () => {
  // A DNS server that answers a public address first and a private one after.
  const answers = ["127.0.0.1", "127.0.0.2"];
  let calls = 0;
  const net = new RegistryNet({
    classify: asPublic,
    resolve: async () => [{ address: answers[Math.min(calls++, 1)] as string, family: 4 }],
  });
  const host = `registry.test:${reg.split(":")[1]}`;
  // Each answer closes its connection, so each request resolves again.
  assert.equal((await client("ok", net, host).getManifest("latest")).bytes.toString(), MANIFEST);
  await assert.rejects(client("ok", net, host).getManifest("latest"), refused("forbidden-address"));
  assert.equal(calls, 2);
  assert.deepEqual(hits.inside, []);
  // Of mixed answers, only the allowed ones are used.
  const mixed = new RegistryNet({
    classify: asPublic,
    resolve: async () => [
      { address: "127.0.0.2", family: 4 },
      { address: "127.0.0.1", family: 4 },
    ],
  });
  assert.equal((await client("ok", mixed, host).getManifest("latest")).bytes.toString(), MANIFEST);
  assert.deepEqual(hits.inside, []);
});
