// The dashboard's bundle as the gateway serves it: the page needs no key, its API still does.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { defaultDashboardDir } from "@aenv/edge/dashboard";
import { httpLimitsFromEnv } from "@aenv/edge/http-config";
import type { Redis } from "ioredis";
import pino from "pino";
import { buildGateway } from "../src/app.js";

const KEY = "e2b_0123456789abcdef0123456789abcdef01234567";
const HTML = { accept: "text/html,application/xhtml+xml;q=0.9" };

describe("dashboard bundle on the gateway", () => {
  test("the page needs no key; the gateway's API still does", async () => {
    // No route the test calls reaches Redis.
    const gw = buildGateway({
      redis: {} as Redis,
      apiKey: KEY,
      log: pino({ level: "silent" }),
      limits: httpLimitsFromEnv({}),
    });
    const dir = defaultDashboardDir();
    const built = !!dir && existsSync(join(dir, "index.html"));
    const r = await gw.inject({ url: "/", headers: HTML });
    assert.equal(r.statusCode, built ? 200 : 503, r.body);
    assert.equal((await gw.inject({ url: "/nodes" })).statusCode, 401);
    assert.equal((await gw.inject({ url: "/", headers: { accept: "application/json" } })).statusCode, 404);
    await gw.close();
  });
});
