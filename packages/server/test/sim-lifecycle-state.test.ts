// The rest of the lifecycle on the simulated runtime, in the fast tier: snapshots and starts
// from them, hibernation (frozen, then saved to disk: running to its client) and what a
// restart of the server keeps (paused sandboxes, their TTL left) and drops (running ones: a
// simulated sandbox lives in the server's process, as a runsc one that died with its host
// would not come back). The same against runsc: test/hibernation*.test.ts, restart.test.ts,
// crash.test.ts and e2b-surface.test.ts.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { NotFoundError, Sandbox } from "e2b";
import { type SimServer, simSdk, startSimServer } from "./helpers/sim-server.js";

const servers: SimServer[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

async function api(s: SimServer, method: string, path: string, body?: unknown) {
  const r = await fetch(`${s.url}${path}`, {
    method,
    headers: { "x-api-key": s.apiKey, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  return { status: r.status, body: (text ? JSON.parse(text) : undefined) as Record<string, unknown> };
}

async function until(what: string, cond: () => Promise<boolean>, ms = 15_000): Promise<void> {
  for (const deadline = Date.now() + ms; !(await cond()); ) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test("a snapshot: listed, started from by ID and by name, deleted", async () => {
  const server = await startSimServer(160);
  servers.push(server);
  const sdk = simSdk(server);
  const src = await Sandbox.create(sdk);
  try {
    const snap = await api(server, "POST", `/sandboxes/${src.sandboxId}/snapshots`, { name: "sim-snap" });
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    const id = snap.body.snapshotID as string;
    const listed = await api(server, "GET", `/snapshots?sandboxID=${src.sandboxId}`);
    assert.ok((listed.body as unknown as Array<{ snapshotID: string }>).some((x) => x.snapshotID === id));
    for (const ref of [id, "sim-snap"]) {
      const child = await Sandbox.create(ref, sdk);
      assert.equal((await child.commands.run("true")).exitCode, 0);
      assert.equal((await child.getInfo()).state, "running");
      await child.kill();
    }
    assert.equal((await src.getInfo()).state, "running", "the source runs on");
    assert.equal((await api(server, "DELETE", `/templates/${id}`)).status, 204);
    assert.equal((await api(server, "GET", `/snapshots?sandboxID=${src.sandboxId}`)).body.length, 0);
  } finally {
    await src.kill();
  }
});

test("hibernation: an idle sandbox is frozen, then saved to disk, and still running to its client", async () => {
  const server = await startSimServer(161, { AENV_HIBERNATE_AFTER: "1", AENV_HIBERNATE_SAVE_AFTER: "1" });
  servers.push(server);
  const sdk = simSdk(server);
  const s = await Sandbox.create(sdk);
  try {
    const placed = async () =>
      (await api(server, "GET", `/v2/sandboxes?state=running`)).body as unknown as Array<{
        sandboxID: string;
        hibernation?: string;
      }>;
    const hibernation = async () => (await placed()).find((x) => x.sandboxID === s.sandboxId)?.hibernation;
    await until("the save to disk", async () => (await hibernation()) === "saved");
    assert.match(server.logs(), /idle sandbox saved to disk/);
    // Shown running (never paused) while saved; its next use brings it back.
    assert.equal((await Sandbox.getInfo(s.sandboxId, sdk)).state, "running");
    const paused = await Sandbox.list({ ...sdk, query: { state: ["paused"] } }).nextItems();
    assert.ok(!paused.some((x) => x.sandboxId === s.sandboxId), "not listed as paused");
    assert.equal((await s.commands.run("true")).exitCode, 0);
    assert.notEqual(await hibernation(), "saved", "a command woke it");
    // A client's pause of a saved sandbox keeps the image it is in, and is a pause from then on.
    await until("the save again", async () => (await hibernation()) === "saved");
    await s.pause();
    assert.equal((await Sandbox.getInfo(s.sandboxId, sdk)).state, "paused");
    const back = await Sandbox.connect(s.sandboxId, sdk);
    assert.equal((await back.commands.run("true")).exitCode, 0);
  } finally {
    await s.kill();
  }
});

test("a crash and restart keep paused sandboxes with the time they had left, and drop those that did not survive", async () => {
  let server = await startSimServer(162);
  const sdk = () => simSdk(server);
  const running = await Sandbox.create({ ...sdk(), timeoutMs: 300_000 });
  const paused = await Sandbox.create({ ...sdk(), timeoutMs: 300_000 });
  await paused.pause();
  // A pause answers once the sandbox is stopped in place; its image follows. A runsc sandbox
  // outlives a crash of the server, which then writes the image; a simulated one does not.
  const written = new RegExp(`"sandboxID":"${paused.sandboxId}"[^\n]*sandbox paused \\(image written\\)`);
  await until("the pause image", async () => written.test(server.logs()));
  await server.stop({ keep: true, crash: true });
  server = await startSimServer(162, {}, { dir: server.dir });
  servers.push(server);
  // Its record said running; its runtime died with the server: cleaned up, not adopted.
  assert.match(server.logs(), new RegExp(`"sandboxID":"${running.sandboxId}"[^\n]*did not survive the server restart`));
  await assert.rejects(Sandbox.getInfo(running.sandboxId, sdk()), NotFoundError);
  const info = await Sandbox.getInfo(paused.sandboxId, sdk());
  assert.equal(info.state, "paused");
  const back = await Sandbox.connect(paused.sandboxId, sdk());
  assert.equal((await back.commands.run("true")).exitCode, 0);
  const left = (await back.getInfo()).endAt.getTime() - Date.now();
  assert.ok(left > 200_000 && left <= 300_000, `the TTL it had left at its pause: ${left} ms`);
  await back.kill();
});
