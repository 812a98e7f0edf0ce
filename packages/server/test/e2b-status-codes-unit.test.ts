// Every route the node serves that E2B's API also has answers success with E2B's status code:
// the SDKs check it (the Python client takes nothing but 201 from GET
// /templates/{id}/files/{hash}, for one). The routes are the ones the server's own route
// plugins register; the success status of each is what its handler sets (`reply.status(2xx)`
// in its code, Fastify's 200 where it sets none), read from the registered handler itself, so a
// route added or changed is checked without starting a sandbox.
import assert from "node:assert/strict";
import { test } from "node:test";
import Fastify, { type FastifyInstance } from "fastify";
import { nodeRoutes } from "../src/api/app.js";
import { sandboxLogRoutes } from "../src/api/routes/sandbox-logs.js";
import { sandboxRoutes } from "../src/api/routes/sandboxes.js";
import { secretRoutes } from "../src/api/routes/secrets.js";
import { templateRoutes } from "../src/api/routes/templates.js";
import { volumeContentRoutes } from "../src/api/routes/volume-content.js";
import { volumeRoutes } from "../src/api/routes/volumes.js";

/**
 * Success codes of E2B's REST API: e2b-dev/E2B spec/openapi.yml (info.version 0.1.0) at commit
 * b8029973 (2026-08-21), plus POST /v2/sandboxes/{sandboxID}/fork, which that spec does not
 * have yet: the SDKs after 2.51 call it like the v1 fork (201 with one result per child).
 */
const E2B_SUCCESS: Record<string, number[]> = {
  "GET /health": [204],
  "GET /teams": [200],
  "GET /teams/{teamID}/metrics": [200],
  "GET /teams/{teamID}/metrics/max": [200],
  "GET /sandboxes": [200],
  "POST /sandboxes": [201],
  "GET /v2/sandboxes": [200],
  "GET /sandboxes/metrics": [200],
  "GET /sandboxes/{sandboxID}/logs": [200],
  "GET /v2/sandboxes/{sandboxID}/logs": [200],
  "GET /sandboxes/{sandboxID}": [200],
  "DELETE /sandboxes/{sandboxID}": [204],
  "GET /sandboxes/{sandboxID}/metrics": [200],
  "POST /sandboxes/{sandboxID}/pause": [204],
  "POST /sandboxes/{sandboxID}/resume": [201],
  "POST /sandboxes/{sandboxID}/fork": [201],
  "POST /v2/sandboxes/{sandboxID}/fork": [201],
  "POST /sandboxes/{sandboxID}/connect": [200, 201],
  "POST /sandboxes/{sandboxID}/timeout": [204],
  "PUT /sandboxes/{sandboxID}/network": [204],
  "POST /sandboxes/{sandboxID}/refreshes": [204],
  "POST /sandboxes/{sandboxID}/snapshots": [201],
  "GET /snapshots": [200],
  "POST /v3/templates": [202],
  "GET /v2/templates": [200],
  "POST /v2/templates": [202],
  "GET /templates/{templateID}/files/{hash}": [201],
  "GET /templates": [200],
  "POST /templates": [202],
  "GET /templates/{templateID}": [200],
  "POST /templates/{templateID}": [202],
  "DELETE /templates/{templateID}": [204],
  "PATCH /templates/{templateID}": [200],
  "POST /templates/{templateID}/builds/{buildID}": [202],
  "POST /v2/templates/{templateID}/builds/{buildID}": [202],
  "PATCH /v2/templates/{templateID}": [200],
  "GET /templates/{templateID}/builds/{buildID}/status": [200],
  "GET /templates/{templateID}/builds/{buildID}/logs": [200],
  "POST /templates/tags": [201],
  "DELETE /templates/tags": [204],
  "GET /templates/{templateID}/tags": [200],
  "GET /templates/aliases/{alias}": [200],
  "GET /nodes": [200],
  "GET /nodes/{nodeID}": [200],
  "POST /nodes/{nodeID}": [204],
  "POST /admin/teams/{teamID}/sandboxes/kill": [200],
  "GET /admin/sandboxes/running-counts": [200],
  "POST /admin/teams/{teamID}/builds/cancel": [200],
  "POST /admin/teams/{teamID}/api-keys": [201],
  "DELETE /admin/teams/{teamID}/api-keys/{apiKeyID}": [204],
  "POST /access-tokens": [201],
  "DELETE /access-tokens/{accessTokenID}": [204],
  "GET /api-keys": [200],
  "POST /api-keys": [201],
  "PATCH /api-keys/{apiKeyID}": [200],
  "DELETE /api-keys/{apiKeyID}": [204],
  "GET /volumes": [200],
  "POST /volumes": [201],
  "GET /volumes/{volumeID}": [200],
  "DELETE /volumes/{volumeID}": [204],
  "GET /secrets": [200],
  "POST /secrets": [201],
  "GET /secrets/{secretID}": [200],
  "POST /secrets/{secretID}": [200],
  "DELETE /secrets/{secretID}": [204],
};

/** Stands in for every dependency: registering routes reads options, it calls nothing. */
const stub: unknown = new Proxy(() => {}, {
  get: (_t, key) => (key === "then" ? undefined : stub),
  apply: () => stub,
});

/** The 2xx codes a handler's code sets; Fastify answers 200 where it sets none. */
function successCodes(handler: (...args: never[]) => unknown): number[] {
  const codes = new Set<number>();
  for (const call of handler.toString().matchAll(/\.status\(([^()]*)\)/g)) {
    for (const n of (call[1] ?? "").matchAll(/\b2\d\d\b/g)) codes.add(Number(n[0]));
  }
  return codes.size ? [...codes].sort() : [200];
}

/** "METHOD /path/{param}" → the 2xx codes of its handler, for every route the plugins register. */
async function registeredRoutes(): Promise<Map<string, number[]>> {
  const app: FastifyInstance = Fastify({ exposeHeadRoutes: false });
  const routes = new Map<string, number[]>();
  app.addHook("onRoute", (r) => {
    const path = r.url.replace(/:(\w+)/g, "{$1}");
    for (const m of [r.method].flat()) routes.set(`${m} ${path}`, successCodes(r.handler as () => unknown));
  });
  const o = stub as never;
  await app.register(nodeRoutes, { health: () => ({}), nodes: () => [], orch: o });
  await app.register(sandboxRoutes, { orch: o, onDemand: o, ctx: { domain: "test" }, secretBinding: o });
  await app.register(sandboxLogRoutes, { orch: o });
  await app.register(templateRoutes, { templates: o, builder: o, files: o, orch: o });
  await app.register(volumeRoutes, { volumes: o, orch: o });
  await app.register(volumeContentRoutes, { volumes: o, content: o, tenantOfKey: o });
  await app.register(secretRoutes, { secrets: o });
  await app.ready();
  await app.close();
  return routes;
}

test("every route E2B's spec also has answers E2B's success status", async (t) => {
  const routes = await registeredRoutes();
  const shared = [...routes.keys()].filter((k) => k in E2B_SUCCESS).sort();
  // The table's reading is right: the core of the API is there (a broken route plugin or a
  // changed path shape would otherwise pass as "nothing to compare").
  for (const k of [
    "POST /sandboxes",
    "POST /sandboxes/{sandboxID}/connect",
    "GET /templates/{templateID}/files/{hash}",
  ]) {
    assert.ok(shared.includes(k), `${k} registered`);
  }
  const got = shared.map((k) => `${k} ${routes.get(k)?.join("|")}`);
  const want = shared.map((k) => `${k} ${E2B_SUCCESS[k]?.join("|")}`);
  assert.deepEqual(got, want);
  t.diagnostic(`compared:\n${got.join("\n")}`);
  assert.ok(shared.length >= 40, `${shared.length} routes compared`);
});
