import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { after, before, test } from "node:test";
import { ENVD_PORT } from "@aenv/protocol";
import { EnvdHeldError, envdRequest, holdEnvd } from "../src/orchestrator/envd-client.js";

// A stand-in envd on a loopback address of its own (envd's port is fixed): /slow?ms=N answers
// after N ms; it counts the connections it accepted.
const IP = "127.0.0.91";
let server: Server;
let accepted = 0;

before(async () => {
  server = createServer((req, res) => {
    const ms = Number(new URL(req.url ?? "/", "http://x").searchParams.get("ms") ?? 0);
    setTimeout(() => res.end("ok"), ms).unref();
  });
  server.on("connection", () => accepted++);
  await new Promise<void>((r) => server.listen(ENVD_PORT, IP, r));
});

after(() => {
  server.closeAllConnections();
  server.close();
});

test("a held address refuses new calls without connecting, lets the holder through, and opens on release", async () => {
  const release = await holdEnvd(IP);
  const before = accepted;
  await assert.rejects(envdRequest(IP, "GET", "/slow"), EnvdHeldError);
  assert.equal(accepted, before, "a refused call must not open a connection");
  const r = await envdRequest(IP, "GET", "/slow", { holder: true });
  assert.equal(r.status, 200);
  release();
  assert.equal((await envdRequest(IP, "GET", "/slow")).body, "ok");
});

test("a hold waits for calls in flight to end", async () => {
  const call = envdRequest(IP, "GET", "/slow?ms=150");
  const t0 = Date.now();
  const release = await holdEnvd(IP, 2000);
  const waited = Date.now() - t0;
  release();
  assert.equal((await call).body, "ok", "the call in flight completes");
  assert.ok(waited >= 100, `the hold returned after ${waited} ms, before the call ended`);
});

test("a call still in flight when the drain time is up is cut", async () => {
  const call = envdRequest(IP, "GET", "/slow?ms=5000", { timeoutMs: 10_000 });
  const t0 = Date.now();
  const release = await holdEnvd(IP, 100);
  const waited = Date.now() - t0;
  release();
  await assert.rejects(call, EnvdHeldError);
  assert.ok(waited < 2000, `the hold took ${waited} ms`);
});

test("an older hold's release does not open a newer hold", async () => {
  const first = await holdEnvd(IP);
  const second = await holdEnvd(IP);
  first();
  await assert.rejects(envdRequest(IP, "GET", "/slow"), EnvdHeldError);
  second();
  assert.equal((await envdRequest(IP, "GET", "/slow")).body, "ok");
});
