// Bad input gets a 4xx with the E2B error body {code, message}; the server keeps serving.
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, before, test } from "node:test";
import { cleanupDataDir, startServer, type TestServer } from "./helpers/server.js";

let server: TestServer;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
});

function assertE2bError(r: { status: number; body: unknown }, status: number): void {
  assert.equal(r.status, status, JSON.stringify(r.body));
  const b = r.body as { code: unknown; message: unknown };
  assert.equal(b.code, status);
  assert.equal(typeof b.message, "string");
}

test("missing or wrong API key → 401", async () => {
  assertE2bError(await server.api("GET", "/v2/sandboxes", undefined, { "x-api-key": "nope" }), 401);
  const r = await fetch(`${server.url}/v2/sandboxes`);
  assert.equal(r.status, 401);
  assert.deepEqual(Object.keys((await r.json()) as object).sort(), ["code", "message"]);
});

test("malformed JSON → 400", async () => {
  assertE2bError(await server.api("POST", "/v2/sandboxes", '{"templateID": "base",'), 400);
});

test("wrong types → 400", async () => {
  assertE2bError(await server.api("POST", "/v2/sandboxes", { templateID: 42 }), 400);
  assertE2bError(await server.api("POST", "/v2/sandboxes", { templateID: "base", timeout: "soon" }), 400);
  assertE2bError(await server.api("POST", "/v2/sandboxes", { templateID: "base", envVars: { A: 1 } }), 400);
  assertE2bError(await server.api("POST", "/v2/sandboxes", []), 400);
  assertE2bError(await server.api("POST", "/sandboxes/ixxxxxxxxxxxxxxxxxxxx/timeout", { timeout: -1 }), 400);
});

test("a disk size over the default ceiling (the data dir's filesystem) → 400 before any pull", async () => {
  // A petabyte disk; the image need not exist, the size is refused first.
  const r = await server.api("POST", "/sandboxes-cold", { image: "127.0.0.1:1/none:latest", diskSizeMB: 2 ** 30 });
  assertE2bError(r, 400);
  assert.match(
    (r.body as { message: string }).message,
    /diskSizeMB 1073741824 is over this server's ceiling of \d+ MB/,
  );
});

test("unknown template → 404", async () => {
  assertE2bError(await server.api("POST", "/v2/sandboxes", { templateID: "no-such-template" }), 404);
});

test("huge body → 413", async () => {
  const big = JSON.stringify({ templateID: "base", metadata: { x: "y".repeat(4 * 1024 * 1024) } });
  // The server answers from the declared length, before reading the body: send a first
  // slice only, read the answer, then drop the connection.
  const r = await new Promise<{ status: number; body: unknown }>((resolve, reject) => {
    const req = request(
      `${server.url}/v2/sandboxes`,
      {
        method: "POST",
        headers: {
          "x-api-key": server.apiKey,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(big),
        },
      },
      (res) => {
        let text = "";
        res.on("data", (d: Buffer) => (text += d.toString()));
        res.on("end", () => {
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) });
          req.destroy();
        });
      },
    );
    req.on("error", (e: NodeJS.ErrnoException) =>
      e.code === "EPIPE" || e.code === "ECONNRESET" ? undefined : reject(e),
    );
    req.write(big.slice(0, 65536));
  });
  assertE2bError(r, 413);
});

test("unknown routes and ids → 404; bad list filters → 400", async () => {
  assertE2bError(await server.api("GET", "/no/such/route"), 404);
  assertE2bError(await server.api("GET", "/sandboxes/ixxxxxxxxxxxxxxxxxxxx"), 404);
  assertE2bError(await server.api("DELETE", "/sandboxes/ixxxxxxxxxxxxxxxxxxxx"), 404);
  assertE2bError(await server.api("GET", "/v2/sandboxes?state=sleeping"), 400);
  assertE2bError(await server.api("GET", "/v2/sandboxes?metadata=novalue"), 400);
  assertE2bError(await server.api("GET", "/v2/sandboxes?limit=0"), 400);
});

test("templates on this node are listed; unknown ones are 404", async () => {
  for (const path of ["/templates", "/v2/templates"]) {
    const r = await server.api("GET", path);
    assert.equal(r.status, 200);
    const base = (r.body as Array<{ templateID: string; envdVersion: string }>).find((t) => t.templateID === "base");
    assert.ok(base, path);
  }
  assert.equal((await server.api("GET", "/templates/base")).status, 200);
  assert.deepEqual((await server.api("GET", "/templates/aliases/base")).body, { templateID: "base", public: false });
  assertE2bError(await server.api("GET", "/templates/nope"), 404);
  assertE2bError(await server.api("GET", "/templates/aliases/nope"), 404);
});

test("the server keeps serving after all of that", async () => {
  const r = await fetch(`${server.url}/health`);
  assert.equal(r.status, 204);
  const list = await server.api("GET", "/v2/sandboxes");
  assert.equal(list.status, 200);
  assert.deepEqual(list.body, []);
});
