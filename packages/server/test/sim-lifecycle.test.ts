// The lifecycle through a real aenv-server on the simulated runtime, driven by the unmodified
// e2b SDK, in the fast tier (no root, no build, no runsc): create, commands, list, timeout,
// pause and resume, fork, kill, and creates with an idempotency key. The same calls against
// runsc sandboxes are test/e2b-sdk.test.ts and its neighbours.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import Database from "better-sqlite3";
import { NotFoundError, Sandbox } from "e2b";
import { SIM_FAIL_INIT_ENV } from "../src/runtime/sim/envd-standin.js";
import { type SimServer, simSdk, startSimServer } from "./helpers/sim-server.js";

let server: SimServer;
let sdk: ReturnType<typeof simSdk>;

before(async () => {
  server = await startSimServer(150);
  sdk = simSdk(server);
});

after(() => server?.stop());

test("create, run, list, timeout, kill", async () => {
  const s = await Sandbox.create({ ...sdk, metadata: { suite: "sim" } });
  try {
    assert.equal((await s.commands.run("echo hello")).stdout, "hello\n");
    const info = await s.getInfo();
    assert.equal(info.templateId, "base");
    assert.equal(info.metadata.suite, "sim");
    const listed = await Sandbox.list({ ...sdk, query: { metadata: { suite: "sim" } } }).nextItems();
    assert.deepEqual(
      listed.map((i) => i.sandboxId),
      [s.sandboxId],
    );
    const before = (await s.getInfo()).endAt.getTime();
    await s.setTimeout(600_000);
    assert.ok((await s.getInfo()).endAt.getTime() > before, "setTimeout moves endAt");
  } finally {
    await s.kill();
  }
  await assert.rejects(Sandbox.getInfo(s.sandboxId, sdk), NotFoundError);
});

test("pause, list as paused, resume by connect", async () => {
  const s = await Sandbox.create(sdk);
  try {
    await s.pause();
    const paused = await Sandbox.list({ ...sdk, query: { state: ["paused"] } }).nextItems();
    assert.ok(paused.some((i) => i.sandboxId === s.sandboxId));
    const back = await Sandbox.connect(s.sandboxId, sdk);
    assert.equal((await back.commands.run("true")).exitCode, 0);
    assert.equal((await back.getInfo()).state, "running");
  } finally {
    await s.kill();
  }
});

test("fork: children run beside the parent", async () => {
  const s = await Sandbox.create(sdk);
  const r = await fetch(`${server.url}/v2/sandboxes/${s.sandboxId}/fork`, {
    method: "POST",
    headers: { "x-api-key": server.apiKey, "content-type": "application/json" },
    body: JSON.stringify({ count: 2 }),
  });
  const kids = (await r.json()) as Array<{ sandbox?: { sandboxID: string } }>;
  try {
    assert.equal(r.status, 201, JSON.stringify(kids));
    assert.equal(kids.length, 2);
    for (const k of kids) {
      assert.ok(k.sandbox, JSON.stringify(k));
      const c = await Sandbox.connect(k.sandbox.sandboxID, sdk);
      assert.equal((await c.commands.run("echo child")).stdout, "child\n");
    }
  } finally {
    for (const id of [s.sandboxId, ...kids.flatMap((k) => (k.sandbox ? [k.sandbox.sandboxID] : []))])
      await Sandbox.kill(id, sdk).catch(() => {});
  }
});

test("creates with one idempotency key make one sandbox, at once, retried and by header; a kill frees the key", async () => {
  const key = `sim-${process.pid}`;
  const opts = { ...sdk, metadata: { "aenv.idempotency_key": key } };
  const made = await Promise.all(Array.from({ length: 4 }, () => Sandbox.create(opts)));
  const id = made[0]?.sandboxId as string;
  try {
    assert.deepEqual(
      made.map((s) => s.sandboxId),
      made.map(() => id),
    );
    assert.equal((await Sandbox.create(opts)).sandboxId, id, "a later retry");
    const post = (headers: Record<string, string>, body: unknown) =>
      fetch(`${server.url}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": server.apiKey, "content-type": "application/json", ...headers },
        body: JSON.stringify(body),
      });
    const byHeader = await post({ "idempotency-key": key }, { templateID: "base" });
    assert.equal(byHeader.status, 201);
    assert.equal(((await byHeader.json()) as { sandboxID: string }).sandboxID, id);
    const clash = await post(
      { "idempotency-key": `${key}-other` },
      { templateID: "base", metadata: { "aenv.idempotency_key": key } },
    );
    assert.equal(clash.status, 400);
    assert.equal((await post({ "idempotency-key": "a b" }, { templateID: "base" })).status, 400);
    assert.equal((await post({ "idempotency-key": "x".repeat(201) }, { templateID: "base" })).status, 400);
    await Sandbox.kill(id, sdk);
    const next = await Sandbox.create(opts);
    assert.notEqual(next.sandboxId, id, "a killed sandbox frees its key");
    await next.kill();
  } finally {
    await Sandbox.kill(id, sdk).catch(() => {});
  }
});

test("TTL: a sandbox past its timeout is paused (this server's default; it resumes by connect), or killed with onTimeout kill", async () => {
  const gone = await Sandbox.create({ ...sdk, timeoutMs: 1_000, lifecycle: { onTimeout: "kill" } });
  const kept = await Sandbox.create({ ...sdk, timeoutMs: 1_000 });
  try {
    const deadline = Date.now() + 15_000;
    const state = async (id: string) => (await Sandbox.getInfo(id, sdk).catch(() => undefined))?.state;
    while (Date.now() < deadline && ((await state(gone.sandboxId)) || (await state(kept.sandboxId)) !== "paused"))
      await new Promise((r) => setTimeout(r, 200));
    assert.equal(await state(gone.sandboxId), undefined, "killed at its timeout");
    assert.equal(await state(kept.sandboxId), "paused", "paused at its timeout");
    const back = await Sandbox.connect(kept.sandboxId, sdk);
    assert.equal((await back.commands.run("echo back")).stdout, "back\n");
  } finally {
    await Sandbox.kill(gone.sandboxId, sdk).catch(() => {});
    await Sandbox.kill(kept.sandboxId, sdk).catch(() => {});
  }
});

test("the team and its metrics: sandboxes running and started, sampled every 5 s", async () => {
  const get = async (path: string) => {
    const r = await fetch(`${server.url}${path}`, { headers: { "x-api-key": server.apiKey } });
    return { status: r.status, body: (await r.json()) as unknown };
  };
  assert.deepEqual((await get("/teams")).body, [
    { teamID: "default", name: "default", apiKey: server.apiKey, isDefault: true },
  ]);
  const a = await Sandbox.create(sdk);
  const b = await Sandbox.create(sdk);
  try {
    type Sample = { timestampUnix: number; concurrentSandboxes: number; sandboxStartRate: number };
    let series: Sample[] = [];
    for (let i = 0; i < 60 && !series.some((m) => m.concurrentSandboxes >= 2); i++) {
      await new Promise((r) => setTimeout(r, 200));
      series = (await get("/teams/default/metrics")).body as Sample[];
    }
    assert.ok(
      series.some((m) => m.concurrentSandboxes >= 2),
      JSON.stringify(series),
    );
    assert.ok(
      series.some((m) => m.sandboxStartRate > 0),
      "the two starts are counted",
    );
    const max = (await get("/teams/default/metrics/max?metric=concurrent_sandboxes")).body as { value: number };
    assert.ok(max.value >= 2);
    assert.equal((await get("/teams/other/metrics")).status, 404);
    assert.equal((await get("/teams/default/metrics/max?metric=nope")).status, 400);
  } finally {
    await a.kill();
    await b.kill();
  }
});

test("a template's minFreeDiskMb sizes its sandboxes' disk in whole GiB, never shrinking it; past the ceiling it is a 400", async () => {
  const post = (body: unknown) =>
    fetch(`${server.url}/v3/templates`, {
      method: "POST",
      headers: { "x-api-key": server.apiKey, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const disk = async (id: string) =>
    (
      (await (await fetch(`${server.url}/templates/${id}`, { headers: { "x-api-key": server.apiKey } })).json()) as {
        diskSizeMB: number;
      }
    ).diskSizeMB;
  const r = await post({ name: "sized", minFreeDiskMb: 5000 });
  const made = (await r.json()) as { templateID: string };
  assert.equal(r.status, 202, JSON.stringify(made));
  assert.equal(await disk(made.templateID), 5120);
  // A smaller request later does not shrink it.
  for (let i = 0; i < 100; i++) {
    const again = await post({ name: "sized", minFreeDiskMb: 100 });
    if (again.status === 202) break;
    assert.equal(again.status, 409, "only a build in progress holds it up");
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(await disk(made.templateID), 5120);
  const huge = await post({ name: "huge", minFreeDiskMb: 2 ** 30 });
  assert.equal(huge.status, 400);
  assert.match(((await huge.json()) as { message: string }).message, /max_disk_size_mb/);
});

test("a create that fails part way (envd's /init refused) leaves no sandbox, record, folder or share of the node", async () => {
  const metric = async (line: string) => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    return Number(
      text
        .split("\n")
        .find((l) => l.startsWith(`${line} `))
        ?.split(" ")[1],
    );
  };
  const before = server.logs().length;
  const r = await fetch(`${server.url}/sandboxes`, {
    method: "POST",
    headers: { "x-api-key": server.apiKey, "content-type": "application/json" },
    body: JSON.stringify({ templateID: "base", envVars: { [SIM_FAIL_INIT_ENV]: "1" } }),
  });
  assert.ok(r.status >= 500, `refused: ${r.status}`);
  // The answer can overtake the log line, which comes through the server's stdout.
  for (let i = 0; !server.logs().slice(before).includes("sandbox create failed") && i < 100; i++) {
    await new Promise((res) => setTimeout(res, 50));
  }
  const logs = server.logs().slice(before);
  // The start that failed, and the pooled sandbox its claim tried first when one was ready.
  const failed = [
    ...logs.matchAll(/"sandboxID":"([^"]+)"[^\n]*"msg":"(sandbox create failed|pooled sandbox failed[^"]*)"/g),
  ];
  assert.ok(
    failed.some((m) => m[2] === "sandbox create failed"),
    logs,
  );
  const db = new Database(join(server.dir, "data", "state.db"), { readonly: true });
  try {
    for (const [, id] of failed) {
      const info = await fetch(`${server.url}/sandboxes/${id}`, { headers: { "x-api-key": server.apiKey } });
      assert.equal(info.status, 404, `${id} is not known`);
      assert.equal(db.prepare("SELECT id FROM sandboxes WHERE id = ?").get(id), undefined, `${id} has no record`);
      // The runtime's removal (stop, slot released, folder removed) finishes in the background.
      const dir = join(server.dir, "data", "sandboxes", id as string);
      for (let i = 0; existsSync(dir) && i < 100; i++) await new Promise((res) => setTimeout(res, 50));
      assert.ok(!existsSync(dir), `${id}'s folder is removed`);
    }
  } finally {
    db.close();
  }
  assert.equal(await metric('aenv_sandboxes{state="creating"}'), 0, "no sandbox left starting");
  assert.equal(await metric("aenv_node_allocated_cpus"), 0, "its share of the node given back");
  assert.doesNotMatch(logs, /rollback step failed/);
  // The node starts the next one as usual.
  const s = await Sandbox.create(sdk);
  assert.equal((await s.commands.run("true")).exitCode, 0);
  await s.kill();
});
