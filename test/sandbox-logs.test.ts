// E2B's sandbox logs (GET /sandboxes/{id}/logs and /v2/sandboxes/{id}/logs): what the server
// logged about the sandbox and what its console holds, in E2B's shapes, with its parameters.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { serverForFile } from "./helpers/server.js";

const srv = serverForFile();

interface Entry {
  timestamp: string;
  level: string;
  message: string;
  fields: Record<string, string>;
}

test("a sandbox's logs in E2B's v1 and v2 shapes, filtered as asked", async () => {
  const s = await Sandbox.create();
  try {
    await s.commands.run("true");
    await s.pause();
    await Sandbox.connect(s.sandboxId);
    const v2 = await srv().api("GET", `/v2/sandboxes/${s.sandboxId}/logs`);
    assert.equal(v2.status, 200);
    const logs = (v2.body as { logs: Entry[] }).logs;
    const messages = logs.map((e) => e.message);
    for (const want of [/^sandbox created$/, /^sandbox paused/, /^sandbox resumed$/]) {
      assert.ok(
        messages.some((m) => want.test(m)),
        `${want} in ${JSON.stringify(messages)}`,
      );
    }
    assert.equal(logs.find((e) => e.message.startsWith("sandbox paused"))?.fields.kind, "memory");
    for (const e of logs) {
      assert.ok(!Number.isNaN(Date.parse(e.timestamp)), e.timestamp);
      assert.ok(["debug", "info", "warn", "error"].includes(e.level));
      assert.equal(typeof e.fields, "object");
    }
    // Oldest first going forward, newest first going backward; limit and search hold.
    const times = logs.map((e) => Date.parse(e.timestamp));
    assert.deepEqual(
      times,
      [...times].sort((a, b) => a - b),
    );
    const back = (await srv().api("GET", `/v2/sandboxes/${s.sandboxId}/logs?direction=backward&limit=1`)).body as {
      logs: Entry[];
    };
    assert.equal(back.logs.length, 1);
    assert.equal(back.logs[0]?.message, logs[logs.length - 1]?.message);
    const found = (await srv().api("GET", `/v2/sandboxes/${s.sandboxId}/logs?search=resumed`)).body as {
      logs: Entry[];
    };
    assert.ok(found.logs.length > 0 && found.logs.every((e) => e.message.includes("resumed")));
    const errorsOnly = (await srv().api("GET", `/v2/sandboxes/${s.sandboxId}/logs?level=error`)).body as {
      logs: Entry[];
    };
    assert.ok(errorsOnly.logs.every((e) => e.level === "error"));
    const future = (await srv().api("GET", `/v2/sandboxes/${s.sandboxId}/logs?cursor=${Date.now() + 60_000}`)).body as {
      logs: Entry[];
    };
    assert.deepEqual(future.logs, []);
    // v1: lines and structured entries.
    const v1 = await srv().api("GET", `/sandboxes/${s.sandboxId}/logs?limit=2`);
    assert.equal(v1.status, 200);
    const b1 = v1.body as { logs: Array<{ timestamp: string; line: string }>; logEntries: Entry[] };
    assert.equal(b1.logs.length, Math.min(2, logs.length));
    assert.equal(b1.logEntries.length, b1.logs.length);
    assert.equal(b1.logs[0]?.line, b1.logEntries[0]?.message);
    // Bad parameters are a 400, an unknown sandbox a 404, no key a 401.
    for (const q of ["limit=5000", "limit=-1", "direction=sideways", "level=loud", `search=${"x".repeat(300)}`]) {
      const r = await srv().api("GET", `/v2/sandboxes/${s.sandboxId}/logs?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal((r.body as { code: number }).code, 400);
    }
    assert.equal((await srv().api("GET", "/v2/sandboxes/i00000000000000000000/logs")).status, 404);
    const anon = await fetch(`${srv().url}/v2/sandboxes/${s.sandboxId}/logs`);
    assert.equal(anon.status, 401);
  } finally {
    await s.kill();
  }
});

test("a full console: logs calls answer from its end at once and do not hold up other requests", async () => {
  const s = await Sandbox.create();
  try {
    // Root inside writes ~8 MB of one-byte lines to its console (the cap is 8 MiB), then a marker.
    await s.commands.run("yes a | head -c 8000000 > /proc/1/fd/1; echo console-filled > /proc/1/fd/1", {
      user: "root",
    });
    const path = `/v2/sandboxes/${s.sandboxId}/logs?direction=backward&limit=10`;
    let health = 0;
    const healthAt = async () => {
      const t = Date.now();
      const r = await fetch(`${srv().url}/health`);
      health = Math.max(health, Date.now() - t);
      return r.status;
    };
    const t0 = Date.now();
    // Several at once, as `e2b sandbox logs -f` from a few terminals, and /health beside them.
    const [calls, healths] = await Promise.all([
      Promise.all(Array.from({ length: 5 }, () => srv().api("GET", path))),
      Promise.all(Array.from({ length: 5 }, (_, i) => new Promise((r) => setTimeout(r, i * 50)).then(healthAt))),
    ]);
    const took = Date.now() - t0;
    for (const r of calls) {
      assert.equal(r.status, 200);
      const logs = (r.body as { logs: Entry[] }).logs;
      assert.equal(logs.length, 10);
      assert.equal(logs.find((e) => e.fields.logger === "envd")?.message, "console-filled", JSON.stringify(logs[0]));
    }
    assert.ok(healths.every((h) => h === 204));
    // Generous bounds (parsing the whole console took 7-12 s a call and held /health as long).
    assert.ok(took < 3000, `five logs calls on a full console took ${took} ms`);
    assert.ok(health < 1500, `/health waited ${health} ms`);
    // Forward from the start still answers, one region's worth at most.
    const first = await srv().api("GET", `/v2/sandboxes/${s.sandboxId}/logs?limit=1000`);
    assert.equal(first.status, 200);
    assert.equal((first.body as { logs: Entry[] }).logs.length, 1000);
  } finally {
    await s.kill();
  }
});
