/**
 * envd's host routes and hostile input at the Connect edge.
 */
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import { after, before, describe, it } from "node:test";
import { ENVD_HEAP_REDUCE_PATH, ENVD_QUIESCE_PATH } from "@aenv/protocol";
import { type Harness, needsRoot, startHarness, TOKEN } from "./helpers.js";

function request(
  url: string,
  opts: { method?: string; headers?: Record<string, string>; body?: Buffer | string } = {},
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? "POST", headers: opts.headers, agent: false }, (res) => {
      let body = "";
      res.setEncoding("latin1");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end(opts.body);
  });
}

function envelope(json: string, flags = 0, len?: number): Buffer {
  const payload = Buffer.from(json);
  const hdr = Buffer.alloc(5);
  hdr[0] = flags;
  hdr.writeUInt32BE(len ?? payload.length, 1);
  return Buffer.concat([hdr, payload]);
}

/** An IPv4 address of this host that is not loopback, if it has one. */
function hostAddress(): string | undefined {
  for (const list of Object.values(os.networkInterfaces()))
    for (const a of list ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  return undefined;
}

describe("envd host routes and hostile input", { skip: needsRoot }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.close();
  });

  it("/quiesce needs the token, closes other connections, then its own", async () => {
    assert.equal((await request(`${h.envdUrl}${ENVD_QUIESCE_PATH}`)).status, 401);
    // a kept-alive idle connection, as the proxy holds them
    const port = Number(new URL(h.envdUrl).port);
    const idle = net.connect(port, "127.0.0.1");
    await new Promise((r) => idle.once("connect", r));
    idle.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    await new Promise((r) => idle.once("data", r));
    const closed = new Promise((r) => idle.once("close", r));
    const q = await request(`${h.envdUrl}${ENVD_QUIESCE_PATH}`, { headers: { "X-Access-Token": TOKEN } });
    assert.equal(q.status, 204);
    assert.equal(q.headers.connection, "close");
    await closed;
    const r = await request(`${h.envdUrl}${ENVD_HEAP_REDUCE_PATH}`, { headers: { "X-Access-Token": TOKEN } });
    assert.equal(r.status, 204);
    assert.equal((await request(`${h.envdUrl}${ENVD_HEAP_REDUCE_PATH}`, { method: "GET" })).status, 405);
  });

  // On the host, whose TCP table envd reads, connections to outside are not under the test's
  // control: it makes one of its own (over a non-loopback address) and checks the refusal.
  it("/quiesce?unlessExternalTcp=1 refuses while a connection to outside is open", {
    skip: !hostAddress() && "no non-loopback IPv4 address",
  }, async () => {
    const addr = hostAddress() as string;
    const server = net.createServer((s) => s.on("error", () => {}));
    await new Promise<void>((r) => server.listen(0, addr, r));
    const out = net.connect((server.address() as net.AddressInfo).port, addr);
    await new Promise((r) => out.once("connect", r));
    try {
      const q = await request(`${h.envdUrl}${ENVD_QUIESCE_PATH}?unlessExternalTcp=1`, {
        headers: { "X-Access-Token": TOKEN },
      });
      assert.equal(q.status, 409);
      assert.match(JSON.parse(q.body).message, /^not idle: [1-9]\d* TCP connection\(s\) to outside the sandbox$/);
    } finally {
      out.destroy();
      server.close();
    }
  });

  it("Connect calls: bad token, bad JSON, bad deadline, oversized and cut envelopes", async () => {
    const url = `${h.envdUrl}/process.Process/List`;
    const json = { "Content-Type": "application/json", "X-Access-Token": TOKEN };
    const unauth = await request(url, { headers: { "Content-Type": "application/json" }, body: "{}" });
    assert.equal(unauth.status, 401);
    assert.equal(JSON.parse(unauth.body).code, "unauthenticated");
    const bad = await request(url, { headers: json, body: "{not json" });
    assert.equal(bad.status, 400);
    assert.equal(JSON.parse(bad.body).code, "invalid_argument");
    const deadline = await request(url, { headers: { ...json, "Connect-Timeout-Ms": "soon" }, body: "{}" });
    assert.equal(deadline.status, 400);
    assert.equal((await request(url, { headers: json, body: "{}" })).status, 200);

    const stream = `${h.envdUrl}/process.Process/Start`;
    const sh = { "Content-Type": "application/connect+json", "X-Access-Token": TOKEN };
    // a length of 2^31: refused from the header, nothing allocated
    const huge = await request(stream, { headers: sh, body: envelope("{}", 0, 2 ** 31) });
    assert.equal(huge.status, 200);
    assert.match(huge.body, /"code":"(resource_exhausted|invalid_argument)"/);
    // an envelope cut short
    const cut = await request(stream, { headers: sh, body: envelope('{"process":{"cmd":"true"}}').subarray(0, 12) });
    assert.match(cut.body, /"code":"(invalid_argument|unknown|internal|canceled)"/);
    const noauth = await request(stream, {
      headers: { "Content-Type": "application/connect+json" },
      body: envelope('{"process":{"cmd":"true"}}'),
    });
    assert.match(noauth.body, /"code":"unauthenticated"/);
  });

  it("unknown routes and methods answer E2B errors", async () => {
    const nf = await request(`${h.envdUrl}/nope`, { method: "GET" });
    assert.equal(nf.status, 404);
    assert.equal(JSON.parse(nf.body).code, 404);
    const init = await request(`${h.envdUrl}/init`, {
      headers: { "Content-Type": "application/json", "X-Access-Token": TOKEN },
      body: "[1,2]",
    });
    assert.equal(init.status, 400);
    assert.equal((await request(`${h.envdUrl}/health`, { method: "DELETE" })).status, 405);
  });
});
