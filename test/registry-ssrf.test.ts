// Image pulls as a way into the server's own network, through a real server with the default
// settings: a cold start or template build naming a registry on loopback (by address or by
// name) is refused before any request leaves, with the setting that would allow it named.
// "The loopback service" is a listener that counts what reaches it.
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { cleanupDataDir, startServer, type TestServer } from "./helpers/server.js";

let server: TestServer;
let service: Server;
let port = 0;
const hits: string[] = [];

before(async () => {
  service = createServer((req, res) => {
    hits.push(req.url ?? "");
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => service.listen(0, "127.0.0.1", r));
  port = (service.address() as AddressInfo).port;
  server = await startServer();
});

after(async () => {
  service.close();
  await server?.stop();
  if (server) cleanupDataDir(server);
});

test("cold starts from a loopback registry are refused and reach nothing", async () => {
  for (const image of [`127.0.0.1:${port}/x:latest`, `localhost:${port}/x:latest`]) {
    const r = await server.api("POST", "/sandboxes-cold", { image });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.match((r.body as { message: string }).message, /allow_private_registries/);
  }
  assert.deepEqual(hits, []);
});

test("template builds from a loopback registry fail and reach nothing", async () => {
  const t = (await server.api("POST", "/v3/templates", { name: "ssrf-build" })).body as {
    templateID: string;
    buildID: string;
  };
  const start = await server.api("POST", `/v2/templates/${t.templateID}/builds/${t.buildID}`, {
    fromImage: `127.0.0.1:${port}/x:latest`,
  });
  assert.equal(start.status, 202, JSON.stringify(start.body));
  let status: { status: string; reason?: { message: string } } = { status: "building" };
  for (let i = 0; i < 100 && (status.status === "building" || status.status === "waiting"); i++) {
    await new Promise((r) => setTimeout(r, 200));
    status = (await server.api("GET", `/templates/${t.templateID}/builds/${t.buildID}/status`)).body as typeof status;
  }
  assert.equal(status.status, "error", JSON.stringify(status));
  assert.match(status.reason?.message ?? "", /allow_private_registries/);
  assert.deepEqual(hits, []);
  await server.api("DELETE", `/templates/${t.templateID}`);
});
