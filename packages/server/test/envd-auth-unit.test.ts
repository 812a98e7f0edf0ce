import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { test } from "node:test";
import type { ProxyTarget } from "@aenv/edge/proxy-target";
import { envdHostToken } from "../src/orchestrator/envd-credentials.js";
import { envdAuth } from "../src/proxy/envd-auth.js";

const client = "client-token";
const tokens = { client, envd: envdHostToken(client), traffic: "traffic-token" };
const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
const at = (port: number, path: string): ProxyTarget => ({ sandboxId: "s1", port, path, via: "header" });

test("the code interpreter's port: the host token for a caller that proved itself, nothing otherwise", () => {
  // The client token opens every route; the traffic token (what the SDKs send there) only the context routes.
  for (const path of ["/execute", "/contexts", "/contexts/abc", "/contexts/abc/restart?x=1"]) {
    assert.deepEqual(envdAuth(req({ "x-access-token": client }), at(49999, path), tokens), {
      accessToken: tokens.envd,
    });
  }
  for (const path of ["/contexts", "/contexts/", "/contexts/abc", "/contexts/abc/restart"]) {
    assert.deepEqual(envdAuth(req({ "e2b-traffic-access-token": "traffic-token" }), at(49999, path), tokens), {
      accessToken: tokens.envd,
    });
  }
  for (const path of ["/execute", "/execute/", "/execute?a=1", "//contexts", "/contexts/../execute", "/%65xecute"]) {
    assert.deepEqual(
      envdAuth(req({ "e2b-traffic-access-token": "traffic-token" }), at(49999, path), tokens),
      { accessToken: null },
      path,
    );
  }
  // A wrong token, or the one envd holds (found in a restored memory), is removed, not passed on.
  for (const t of ["wrong", tokens.envd, ""]) {
    assert.deepEqual(envdAuth(req({ "x-access-token": t }), at(49999, "/execute"), tokens), { accessToken: null });
  }
  assert.deepEqual(envdAuth(req({ "e2b-traffic-access-token": "nope" }), at(49999, "/contexts"), tokens), {
    accessToken: null,
  });
});

test("other ports keep their rules: envd's checks the client token, an app's gets no client token", () => {
  assert.deepEqual(envdAuth(req({ "x-access-token": client }), at(49983, "/health"), tokens), {
    accessToken: tokens.envd,
  });
  assert.equal(
    (envdAuth(req({ "x-access-token": "wrong" }), at(49983, "/files"), tokens) as { status: number }).status,
    401,
  );
  assert.deepEqual(envdAuth(req({ "x-access-token": client }), at(8080, "/"), tokens), { accessToken: null });
  assert.deepEqual(envdAuth(req({ "x-access-token": "apps-own" }), at(8080, "/"), tokens), { accessToken: "apps-own" });
});
