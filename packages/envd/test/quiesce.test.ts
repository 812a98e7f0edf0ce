/** /quiesce, which the host calls right before a checkpoint: token, closed connections, the GC on request; /heap/reduce. */
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, describe, it } from "node:test";
import { ENVD_HEAP_REDUCE_PATH, ENVD_QUIESCE_PATH } from "@aenv/protocol";
import { type Harness, needsRoot, startHarness, TOKEN } from "./helpers.js";

function post(url: string, headers: Record<string, string> = {}): Promise<{ status: number; connection?: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: "POST", headers, agent: false }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
    });
    req.on("error", reject);
    req.end();
  });
}

describe("envd /quiesce", { skip: needsRoot }, () => {
  let h: Harness;
  const g = globalThis as { gc?: () => void };
  const realGc = g.gc;
  let gcCalls = 0;

  before(async () => {
    h = await startHarness();
    // envd runs in-process here: a counting gc stands in for node's --expose-gc one.
    g.gc = () => gcCalls++;
  });
  after(async () => {
    g.gc = realGc;
    await h?.close();
  });

  it("needs the token", async () => {
    assert.equal((await post(`${h.envdUrl}${ENVD_QUIESCE_PATH}`)).status, 401);
  });

  it("closes other connections before it answers, its own after", async () => {
    // An idle keep-alive connection, as the proxy or the SDK leaves open.
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const socketClosed = new Promise<void>((resolve) => {
      const req = http.get(`${h.envdUrl}/health`, { agent }, (res) => {
        res.resume();
        res.on("end", () => req.socket?.once("close", () => resolve()));
      });
    });
    await new Promise((r) => setTimeout(r, 50));
    const r = await post(`${h.envdUrl}${ENVD_QUIESCE_PATH}`, { "x-access-token": TOKEN });
    assert.equal(r.status, 204);
    assert.equal(r.connection, "close");
    await socketClosed;
    agent.destroy();
  });

  it("collects garbage only when asked (?gc=1: an image many sandboxes start from)", async () => {
    gcCalls = 0;
    assert.equal((await post(`${h.envdUrl}${ENVD_QUIESCE_PATH}`, { "x-access-token": TOKEN })).status, 204);
    assert.equal(gcCalls, 0);
    assert.equal((await post(`${h.envdUrl}${ENVD_QUIESCE_PATH}?gc=1`, { "x-access-token": TOKEN })).status, 204);
    assert.equal(gcCalls, 1);
  });

  it("/heap/reduce (before a freeze): needs the token and POST, collects", async () => {
    const url = `${h.envdUrl}${ENVD_HEAP_REDUCE_PATH}`;
    assert.equal((await post(url)).status, 401);
    gcCalls = 0;
    // Without aenv-trim.node (envd in-process here) a reduce is a full GC.
    const r = await post(url, { "x-access-token": TOKEN });
    assert.equal(r.status, 204);
    assert.equal(gcCalls, 1);
    const get = await new Promise<number>((resolve, reject) => {
      http
        .get(url, { headers: { "x-access-token": TOKEN }, agent: false }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on("error", reject);
    });
    assert.equal(get, 405);
  });
});
