// The retry contract under load, with the unmodified e2b SDK: 300 creates at once against a
// node capped at 50 sandboxes. Every answer is a sandbox or a 503 with Retry-After and E2B's
// error_code, never another 5xx; what was served is exactly what the node lists; and clients
// that honour Retry-After (create, run, kill, as rollouts do) all get a sandbox in the end. On
// the simulated runtime: what is under test is admission and the answers, not runsc.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { simSdk, startSimServer } from "../packages/server/test/helpers/sim-server.js";

test("300 creates at once against a node capped at 50: 201 or 503 with Retry-After and error_code, nothing leaked; retrying clients all get one", async () => {
  const capped = await startSimServer(151, { AENV_MAX_SANDBOXES: "50" });
  const post = () =>
    fetch(`${capped.url}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": capped.apiKey, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", timeout: 120 }),
    });
  const ids: string[] = [];
  try {
    const answers = await Promise.all(Array.from({ length: 300 }, post));
    const statuses = new Map<number, number>();
    for (const a of answers) {
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
      const body = (await a.json()) as { sandboxID?: string; error_code?: string; code?: number };
      if (a.status === 201) {
        ids.push(body.sandboxID as string);
        continue;
      }
      assert.equal(a.status, 503, JSON.stringify(body));
      assert.ok(Number(a.headers.get("retry-after")) >= 1, "Retry-After on every refusal");
      assert.equal(body.error_code, "sandbox_capacity_unavailable");
      assert.equal(body.code, 503);
    }
    assert.ok(ids.length > 0 && ids.length <= 50, `served ${ids.length}: ${JSON.stringify([...statuses])}`);
    const listed = await Sandbox.list({ ...simSdk(capped), limit: 100 }).nextItems();
    assert.deepEqual(listed.map((i) => i.sandboxId).sort(), [...ids].sort(), "the list is exactly what was served");
    await Promise.all(ids.splice(0).map((id) => Sandbox.kill(id, simSdk(capped))));
    // Rollout clients: each creates, runs a command, kills, and on a 503 waits Retry-After.
    let refused = 0;
    const client = async () => {
      for (let attempt = 0; attempt < 60; attempt++) {
        const a = await post();
        if (a.status === 503) {
          refused++;
          await a.body?.cancel();
          await new Promise((r) => setTimeout(r, Number(a.headers.get("retry-after") ?? 1) * 1000));
          continue;
        }
        assert.equal(a.status, 201);
        const id = ((await a.json()) as { sandboxID: string }).sandboxID;
        const s = await Sandbox.connect(id, simSdk(capped));
        assert.equal((await s.commands.run("true")).exitCode, 0);
        // A rollout's work: held long enough that 300 clients at once fill the node's 50
        // whatever the host's speed (a sim create is milliseconds, so without it the node may
        // never hold 50 at once and the retry path would go untested).
        await new Promise((r) => setTimeout(r, 500));
        await s.kill();
        return;
      }
      throw new Error("no sandbox after 60 attempts");
    };
    await Promise.all(Array.from({ length: 300 }, client));
    assert.ok(refused > 0, "the cap was reached");
    assert.deepEqual(await Sandbox.list(simSdk(capped)).nextItems(), [], "none left running");
  } finally {
    await Promise.all(ids.map((id) => Sandbox.kill(id, simSdk(capped)).catch(() => {})));
    await capped.stop();
  }
});

test("300 creates at once with an API key capped at 20: 201 or 429 with Retry-After and error_code, never over its cap; retrying clients all get one", async () => {
  const node = await startSimServer(153, { AENV_MAX_SANDBOXES: "50" });
  const made = await fetch(`${node.url}/api-keys`, {
    method: "POST",
    headers: { "x-api-key": node.apiKey, "content-type": "application/json" },
    body: JSON.stringify({ name: "trainer", limits: { maxSandboxes: 20 } }),
  });
  const { key } = (await made.json()) as { key: string };
  const sdk = { ...simSdk(node), apiKey: key };
  const post = () =>
    fetch(`${node.url}/sandboxes`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "base", timeout: 120 }),
    });
  const ids: string[] = [];
  let keyRefusals = 0;
  try {
    const answers = await Promise.all(Array.from({ length: 300 }, post));
    for (const a of answers) {
      const body = (await a.json()) as { sandboxID?: string; error_code?: string };
      if (a.status === 201) {
        ids.push(body.sandboxID as string);
        continue;
      }
      // The key's cap (429), or the node's start queue (503): both say when to come back.
      assert.ok(a.status === 429 || a.status === 503, JSON.stringify(body));
      assert.ok(Number(a.headers.get("retry-after")) >= 1, "Retry-After on every refusal");
      assert.equal(body.error_code, a.status === 429 ? "api_key_sandbox_limit" : "sandbox_capacity_unavailable");
      if (a.status === 429) keyRefusals++;
    }
    assert.ok(ids.length > 0 && ids.length <= 20, `served ${ids.length}`);
    assert.ok(keyRefusals > 0, "the key's cap refused some");
    const listed = await Sandbox.list({ ...sdk, limit: 100 }).nextItems();
    assert.deepEqual(listed.map((i) => i.sandboxId).sort(), [...ids].sort(), "the key's list is what it was served");
    await Promise.all(ids.splice(0).map((id) => Sandbox.kill(id, sdk)));
    let running = 0;
    let most = 0;
    const client = async () => {
      for (let attempt = 0; attempt < 120; attempt++) {
        const a = await post();
        if (a.status === 429 || a.status === 503) {
          await a.body?.cancel();
          await new Promise((r) => setTimeout(r, Number(a.headers.get("retry-after") ?? 1) * 1000));
          continue;
        }
        assert.equal(a.status, 201);
        running++;
        most = Math.max(most, running);
        const id = ((await a.json()) as { sandboxID: string }).sandboxID;
        const s = await Sandbox.connect(id, sdk);
        assert.equal((await s.commands.run("true")).exitCode, 0);
        running--;
        await s.kill();
        return;
      }
      throw new Error("no sandbox after 120 attempts");
    };
    await Promise.all(Array.from({ length: 300 }, client));
    assert.ok(most <= 20, `the key ran ${most} at once`);
    assert.deepEqual(await Sandbox.list(sdk).nextItems(), [], "none left running");
  } finally {
    await Promise.all(ids.map((id) => Sandbox.kill(id, sdk).catch(() => {})));
    await node.stop();
  }
});
