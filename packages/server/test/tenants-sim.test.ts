// API keys as tenants, through a real aenv-server on the simulated runtime (fast tier): keys
// made, listed and revoked by the operator; key B cannot see, read, change or start from
// anything key A made, by ID, name or any route that names it; each key's limits answer 429
// with Retry-After and an error_code.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { SecretStore } from "../src/secrets/store.js";
import { type SimServer, simSdk, startSimServer } from "./helpers/sim-server.js";

let server: SimServer;

interface Answer {
  status: number;
  body: unknown;
  headers: Headers;
}

async function call(key: string | undefined, method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await fetch(`${server.url}${path}`, {
    method,
    headers: {
      ...(key ? { "x-api-key": key } : {}),
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {}
  return { status: res.status, body: parsed, headers: res.headers };
}

const op = (method: string, path: string, body?: unknown) => call(server.apiKey, method, path, body);

async function newKey(name: string, limits?: Record<string, number>): Promise<{ id: string; key: string }> {
  const r = await op("POST", "/api-keys", { name, ...(limits ? { limits } : {}) });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body as { id: string; key: string };
}

before(async () => {
  server = await startSimServer(157);
});
after(() => server?.stop());

describe("API keys", () => {
  test("the operator makes, lists and revokes keys; a key is shown once; others may not manage keys", async () => {
    const a = await newKey("trainer-a", { maxSandboxes: 5 });
    assert.match(a.key, /^e2b_[0-9a-f]{40}$/);
    const listed = (await op("GET", "/api-keys")).body as Array<Record<string, unknown>>;
    assert.equal(listed[0]?.id, "operator");
    const mine = listed.find((k) => k.id === a.id);
    assert.ok(mine, "listed");
    assert.equal(mine.key, undefined, "the key itself is never listed");
    assert.deepEqual(mine.limits, { maxSandboxes: 5 });
    assert.equal((mine.mask as { maskedValueSuffix: string }).maskedValueSuffix, a.key.slice(-4));
    assert.equal((await call(a.key, "GET", "/api-keys")).status, 403);
    assert.equal((await call(a.key, "POST", "/api-keys", { name: "x" })).status, 403);
    assert.equal((await call(a.key, "GET", "/nodes")).status, 403);
    // What nodes send each other (snapshot chunks hold other keys' sandboxes' memory) is the operator's.
    assert.equal((await call(a.key, "GET", `/cluster/chunks/${"0".repeat(64)}`)).status, 403);
    assert.equal((await call(a.key, "GET", `/cluster/blobs/sha256/${"0".repeat(64)}`)).status, 403);
    assert.equal((await op("GET", `/cluster/chunks/${"0".repeat(64)}`)).status, 404);
    assert.equal((await call(undefined, "GET", "/api-keys")).status, 401);
    const renamed = await op("PATCH", `/api-keys/${a.id}`, { name: "trainer-a2", limits: null });
    assert.equal(renamed.status, 200);
    assert.equal((renamed.body as { limits?: unknown }).limits, undefined);
    assert.equal((await op("POST", "/api-keys", { name: "" })).status, 400);
    assert.equal((await op("POST", "/api-keys", { name: "x", limits: { maxSandboxes: -1 } })).status, 400);
    assert.equal((await op("DELETE", "/api-keys/operator")).status, 400);
    assert.equal((await call(a.key, "GET", "/sandboxes")).status, 200);
    const used = async () =>
      ((await op("GET", "/api-keys")).body as Array<{ id: string; lastUsed: string | null }>).find((x) => x.id === a.id)
        ?.lastUsed;
    for (let i = 0; i < 20 && !(await used()); i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(await used(), "lastUsed is kept");
    assert.equal((await op("DELETE", `/api-keys/${a.id}`)).status, 204);
    assert.equal((await call(a.key, "GET", "/sandboxes")).status, 401, "a revoked key opens nothing");
    assert.equal((await op("DELETE", `/api-keys/${a.id}`)).status, 404);
  });

  test("key B cannot reach anything key A made, by any route", async () => {
    const A = await newKey("a");
    const B = await newKey("b");
    const sa = await Sandbox.create({ ...simSdk(server), apiKey: A.key, metadata: { who: "a" } });
    const id = sa.sandboxId;
    const snap = await call(A.key, "POST", `/sandboxes/${id}/snapshots`, { name: "a-snap" });
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    const snapId = (snap.body as { snapshotID: string }).snapshotID;
    const vol = await call(A.key, "POST", "/volumes", { name: "a-vol" });
    assert.equal(vol.status, 201);
    const volId = (vol.body as { volumeID: string }).volumeID;
    assert.equal(
      (await call(A.key, "POST", "/secrets", { name: "tok", value: "v1", allowedHosts: ["x.example"] })).status,
      201,
    );
    assert.equal(
      (await call(A.key, "POST", "/secrets", { name: "a-only", value: "v2", allowedHosts: ["x.example"] })).status,
      201,
    );
    const tpl = await call(A.key, "POST", "/v3/templates", { name: "a-tpl" });
    assert.equal(tpl.status, 202, JSON.stringify(tpl.body));
    const tplId = (tpl.body as { templateID: string }).templateID;

    // Every route that names A's sandbox answers B as if there were none.
    const sandboxRoutes: Array<[string, string, unknown?]> = [
      ["GET", `/sandboxes/${id}`],
      ["POST", `/sandboxes/${id}/timeout`, { timeout: 60 }],
      ["POST", `/sandboxes/${id}/refreshes`, { duration: 60 }],
      ["POST", `/sandboxes/${id}/connect`, { timeout: 60 }],
      ["POST", `/v2/sandboxes/${id}/connect`, { timeout: 60 }],
      ["POST", `/sandboxes/${id}/resume`, {}],
      ["POST", `/sandboxes/${id}/pause`, {}],
      ["POST", `/sandboxes/${id}/snapshots`, {}],
      ["POST", `/sandboxes/${id}/fork`, { count: 1 }],
      ["POST", `/v2/sandboxes/${id}/fork`, { count: 1 }],
      ["PUT", `/sandboxes/${id}/network`, {}],
      ["GET", `/sandboxes/${id}/metrics`],
      ["GET", `/sandboxes/${id}/logs`],
      ["GET", `/v2/sandboxes/${id}/logs`],
      ["DELETE", `/sandboxes/${id}`],
    ];
    for (const [m, p, b] of sandboxRoutes) {
      const r = await call(B.key, m, p, b);
      assert.equal(r.status, 404, `${m} ${p} answered B ${r.status}: ${JSON.stringify(r.body)}`);
    }
    const ids = (r: Answer) => (r.body as Array<{ sandboxID: string }>).map((s) => s.sandboxID);
    assert.ok(!ids(await call(B.key, "GET", "/sandboxes")).includes(id));
    assert.ok(!ids(await call(B.key, "GET", "/v2/sandboxes?state=running,paused")).includes(id));
    const batch = await call(B.key, "GET", `/sandboxes/metrics?sandbox_ids=${id}`);
    assert.deepEqual(batch.body, { sandboxes: {} });

    // A's snapshot: not listed, not read, not deleted, not started from (by ID or name).
    assert.equal((await call(B.key, "GET", `/snapshots/${snapId}`)).status, 404);
    assert.equal((await call(B.key, "GET", "/snapshots/a-snap")).status, 404);
    assert.ok(
      !((await call(B.key, "GET", "/snapshots")).body as Array<{ snapshotID: string }>).some(
        (s) => s.snapshotID === snapId,
      ),
    );
    assert.equal((await call(B.key, "DELETE", `/templates/${snapId}`)).status, 404);
    for (const from of [snapId, "a-snap"]) {
      assert.equal((await call(B.key, "POST", "/sandboxes", { templateID: from })).status, 404, from);
    }
    // A name B takes for its own snapshot is B's newest build, never what A starts by that name.
    const sb = await Sandbox.create({ ...simSdk(server), apiKey: B.key });
    assert.equal((await call(B.key, "POST", `/sandboxes/${sb.sandboxId}/snapshots`, { name: "a-snap" })).status, 201);
    const fromName = await call(A.key, "POST", "/sandboxes", { templateID: "a-snap" });
    assert.equal(fromName.status, 201);
    const started = await call(
      server.apiKey,
      "GET",
      `/sandboxes/${(fromName.body as { sandboxID: string }).sandboxID}`,
    );
    assert.equal((started.body as { templateID: string }).templateID, snapId, "A's name still starts A's snapshot");

    // A's private template: not listed, read, rebuilt, changed, removed or started.
    assert.equal((await call(B.key, "GET", `/templates/${tplId}`)).status, 404);
    assert.equal((await call(B.key, "GET", "/templates/aliases/a-tpl")).status, 404);
    assert.ok(
      !((await call(B.key, "GET", "/templates")).body as Array<{ templateID: string }>).some(
        (t) => t.templateID === tplId,
      ),
    );
    assert.equal((await call(B.key, "POST", "/v3/templates", { name: "a-tpl" })).status, 409);
    assert.equal((await call(B.key, "PATCH", `/templates/${tplId}`, { public: true })).status, 404);
    assert.equal((await call(B.key, "DELETE", `/templates/${tplId}`)).status, 404);
    assert.equal((await call(B.key, "GET", `/templates/${tplId}/files/${"a".repeat(64)}`)).status, 404);
    assert.equal((await call(B.key, "POST", "/templates/tags", { target: "a-tpl", tags: ["x"] })).status, 404);
    // The operator's templates are every key's to start; B may read, not change, them.
    assert.equal((await call(B.key, "GET", "/templates/base")).status, 200);
    assert.equal((await call(B.key, "DELETE", "/templates/base")).status, 404);
    assert.equal((await call(B.key, "POST", "/v3/templates", { name: "base" })).status, 409);

    // A's volume, secret and webhook.
    assert.equal((await call(B.key, "GET", `/volumes/${volId}`)).status, 404);
    assert.equal((await call(B.key, "DELETE", `/volumes/${volId}`)).status, 404);
    assert.deepEqual((await call(B.key, "GET", "/volumes")).body, []);
    assert.equal((await call(B.key, "GET", `/volumecontent/${volId}/dir?path=/`)).status, 404);
    const mount = await call(B.key, "POST", "/sandboxes", {
      templateID: "base",
      volumeMounts: [{ name: "a-vol", path: "/data" }],
    });
    assert.equal(mount.status, 404, "B has no volume of that name");
    assert.equal((await call(B.key, "GET", "/secrets/tok")).status, 404);
    assert.deepEqual((await call(B.key, "GET", "/secrets")).body, []);
    assert.equal(
      (await call(B.key, "POST", "/secrets", { name: "tok", value: "b1", allowedHosts: ["x.example"] })).status,
      201,
      "names are each key's own",
    );
    // A rule of B's naming A's secret for a host A never bound it to: B's create does not learn
    // A's binding (no 400 naming it; the sim runtime then fails to install the egress CA).
    const rule = {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder, sent as it is
      network: { rules: { "evil.example": [{ transform: { headers: { "x-t": "${e2b.secrets.a-only}" } } }] } },
    };
    const ruled = await call(B.key, "POST", "/sandboxes", { templateID: "base", ...rule });
    assert.notEqual(ruled.status, 400, JSON.stringify(ruled.body));
    const hook = await call(A.key, "POST", "/events/webhooks", {
      name: "a",
      url: "https://hooks.example/a",
      events: ["sandbox.lifecycle.created"],
      signatureSecret: "0123456789",
    });
    const hookId = (hook.body as { id?: string }).id;
    if (hook.status === 201 && hookId) {
      assert.equal((await call(B.key, "GET", `/events/webhooks/${hookId}`)).status, 404);
      assert.equal((await call(B.key, "DELETE", `/events/webhooks/${hookId}`)).status, 404);
      assert.deepEqual((await call(B.key, "GET", "/events/webhooks")).body, []);
    }

    // The same idempotency key from B makes B's own sandbox.
    const ka = await call(A.key, "POST", "/sandboxes", {
      templateID: "base",
      metadata: { "aenv.idempotency_key": "k1" },
    });
    const kb = await call(B.key, "POST", "/sandboxes", {
      templateID: "base",
      metadata: { "aenv.idempotency_key": "k1" },
    });
    assert.equal(kb.status, 201);
    assert.notEqual((ka.body as { sandboxID: string }).sandboxID, (kb.body as { sandboxID: string }).sandboxID);

    // The operator sees and acts on everything; A still has all of its own.
    assert.equal((await op("GET", `/sandboxes/${id}`)).status, 200);
    assert.equal((await call(A.key, "GET", `/sandboxes/${id}`)).status, 200);
    assert.equal((await call(A.key, "GET", `/snapshots/${snapId}`)).status, 200);
    assert.equal((await call(A.key, "GET", `/volumes/${volId}`)).status, 200);
    const opList = ids(await op("GET", "/sandboxes"));
    assert.ok(opList.includes(id) && opList.includes(sb.sandboxId));
    await sa.kill();
  });

  test("the egress proxy fills in a sandbox's own key's secrets only", async () => {
    const dir = mkdtempSync("/var/tmp/aenv-secrets-test-");
    try {
      const store = await SecretStore.inFolder(dir);
      await store.create("tok", "from-a", {}, ["x.example"], "key-a");
      await store.create("tok", "from-b", {}, ["x.example"], "key-b");
      await store.create("only-a", "a2", {}, ["x.example"], "key-a");
      assert.deepEqual(store.use("tok", "x.example", "key-b"), { value: "from-b" });
      assert.deepEqual(store.use("tok", "x.example", "key-a"), { value: "from-a" });
      assert.equal((store.use("only-a", "x.example", "key-b") as { refused?: string }).refused, "missing");
      assert.equal((store.use("tok", "x.example", undefined) as { refused?: string }).refused, "missing");
      assert.equal(store.bindingOf("only-a", "key-b"), undefined);
      assert.equal((await store.list({ owner: "key-b" })).length, 1);
      assert.equal((await store.list({ all: true })).length, 3);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a key's limits: concurrent sandboxes, creates a second, calls a window (429, Retry-After, error_code)", async () => {
    const C = await newKey("c", { maxSandboxes: 2 });
    const made: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await call(C.key, "POST", "/sandboxes", { templateID: "base" });
      assert.equal(r.status, 201);
      made.push((r.body as { sandboxID: string }).sandboxID);
    }
    const over = await call(C.key, "POST", "/sandboxes", { templateID: "base" });
    assert.equal(over.status, 429, JSON.stringify(over.body));
    assert.equal((over.body as { error_code: string }).error_code, "api_key_sandbox_limit");
    assert.ok(Number(over.headers.get("retry-after")) >= 1);
    assert.equal(
      (await call(C.key, "POST", `/sandboxes/${made[0]}/fork`, { count: 1 })).status,
      429,
      "a fork counts too",
    );
    // A paused sandbox does not count; resuming it does.
    assert.equal((await call(C.key, "POST", `/sandboxes/${made[0]}/pause`, {})).status, 204);
    const third = await call(C.key, "POST", "/sandboxes", { templateID: "base" });
    assert.equal(third.status, 201);
    const resume = await call(C.key, "POST", `/sandboxes/${made[0]}/connect`, { timeout: 60 });
    assert.equal(resume.status, 429);
    // Other keys and the operator are not held by C's cap.
    assert.equal((await op("POST", "/sandboxes", { templateID: "base" })).status, 201);
    const metrics = await (await fetch(`${server.url}/metrics`, { headers: { "x-api-key": server.apiKey } })).text();
    assert.match(metrics, new RegExp(`aenv_api_key_sandboxes\\{key="${C.id}"\\} 2\\b`));
    assert.match(metrics, new RegExp(`aenv_api_key_refusals_total\\{key="${C.id}",limit="sandboxes"\\} 3\\b`));

    const D = await newKey("d", { createsPerSecond: 0.2 });
    assert.equal((await call(D.key, "POST", "/sandboxes", { templateID: "base" })).status, 201);
    const fast = await call(D.key, "POST", "/sandboxes", { templateID: "base" });
    assert.equal(fast.status, 429);
    assert.equal((fast.body as { error_code: string }).error_code, "api_key_rate_limit");
    assert.equal(fast.headers.get("retry-after"), "5");

    const E = await newKey("e", { callsPerWindow: 3, windowSeconds: 60 });
    for (let i = 0; i < 3; i++) assert.equal((await call(E.key, "GET", "/sandboxes")).status, 200);
    const tooMany = await call(E.key, "GET", "/sandboxes");
    assert.equal(tooMany.status, 429);
    assert.equal((tooMany.body as { error_code: string }).error_code, "api_key_rate_limit");
  });
});
