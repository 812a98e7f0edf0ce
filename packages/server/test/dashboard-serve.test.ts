// The dashboard's bundle as a node's API serves it: the page and its files need no key, nothing
// else changes for API clients, and only the bundle's own files are answered (the gateway's:
// packages/gateway/test/dashboard.test.ts).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { dashboardRoutes } from "@aenv/edge/dashboard";
import { installAuth } from "@aenv/edge/tenancy";
import Fastify from "fastify";
import { installErrorHandling } from "../src/api/error-handler.js";
import { memoryTenants } from "./helpers/tenants.js";

const KEY = "e2b_0123456789abcdef0123456789abcdef01234567";
const HTML = { accept: "text/html,application/xhtml+xml;q=0.9" };

const bundle = mkdtempSync(join(tmpdir(), "aenv-dashboard-"));
mkdirSync(join(bundle, "assets"));
writeFileSync(join(bundle, "index.html"), '<!doctype html><script src="/dashboard/assets/app-1.js"></script>');
writeFileSync(join(bundle, "assets", "app-1.js"), "console.log(1)");
writeFileSync(join(tmpdir(), "outside.txt"), "outside the bundle");
after(() => rmSync(bundle, { recursive: true, force: true }));

async function api(dir: string | undefined) {
  const app = Fastify();
  installErrorHandling(app);
  installAuth(app, memoryTenants(KEY));
  app.get("/v2/sandboxes", async () => []);
  await app.register(dashboardRoutes, { dir });
  return app;
}

describe("dashboard bundle on the API", () => {
  test("GET / for a browser is the page, without the key, with a strict CSP", async () => {
    const app = await api(bundle);
    const r = await app.inject({ url: "/", headers: HTML });
    assert.equal(r.statusCode, 200);
    assert.match(r.headers["content-type"] as string, /^text\/html/);
    assert.match(r.headers["content-security-policy"] as string, /script-src 'self'.*frame-ancestors 'none'/);
    assert.equal(r.headers["cache-control"], "no-store");
    const js = await app.inject({ url: "/dashboard/assets/app-1.js" });
    assert.equal(js.statusCode, 200);
    assert.match(js.headers["content-type"] as string, /^text\/javascript/);
    assert.equal(js.body, "console.log(1)");
  });

  test("API clients see the API as before: GET / is no route, the rest needs the key", async () => {
    const app = await api(bundle);
    const r = await app.inject({ url: "/", headers: { accept: "application/json" } });
    assert.equal(r.statusCode, 404);
    assert.deepEqual(Object.keys(r.json()).sort(), ["code", "message"]);
    assert.equal((await app.inject({ url: "/v2/sandboxes" })).statusCode, 401);
    assert.equal((await app.inject({ url: "/v2/sandboxes", headers: { "x-api-key": KEY } })).statusCode, 200);
  });

  test("only the bundle's files: no request path reaches the file system", async () => {
    const app = await api(bundle);
    for (const url of [
      "/dashboard/index.html",
      "/dashboard/../outside.txt",
      "/dashboard/%2e%2e/outside.txt",
      "/dashboard/assets/%2e%2e%2f%2e%2e%2foutside.txt",
      "/dashboard/assets/",
      "/dashboard/assets/missing.js",
    ]) {
      const r = await app.inject({ url });
      assert.ok(r.statusCode === 404 || r.statusCode === 401, `${url}: ${r.statusCode}`);
      assert.ok(!r.body.includes("outside the bundle"), url);
    }
  });

  test("a server built without the dashboard says so and still serves the API", async () => {
    const app = await api(join(bundle, "not-built"));
    const r = await app.inject({ url: "/", headers: HTML });
    assert.equal(r.statusCode, 503);
    assert.match(r.json().message, /not built/);
    assert.equal((await app.inject({ url: "/v2/sandboxes", headers: { "x-api-key": KEY } })).statusCode, 200);
  });
});
