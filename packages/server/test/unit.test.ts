import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { InvalidRequestError } from "@aenv/edge/errors";
import { decodeCursor, encodeCursor, parseMetadataFilter, parseStates } from "@aenv/edge/list-filter";
import { resolveTarget } from "@aenv/edge/proxy-target";
import { signedFilesTarget } from "@aenv/edge/signed-files";
import { computeFileSignature, ENVD_PORT } from "@aenv/protocol";
import { E2B_KEY_FORM, parseListen, resolveApiKey } from "../src/config.js";
import { parseCidr16, slotAddresses } from "../src/network/addresses.js";
import { upstreamHeaders } from "../src/proxy/upstream-headers.js";
import { newSandboxId, SANDBOX_ID_RE } from "../src/state/ids.js";

function req(url: string, headers: Record<string, string> = {}): IncomingMessage {
  return { url, headers, socket: { remoteAddress: "127.0.0.1" } } as unknown as IncomingMessage;
}

describe("list filters", () => {
  test("decodes the SDK's triple-encoded metadata (after the framework's one decode)", () => {
    // What the SDK sends for {user:'a b','k&':'v=1'} once the query string is decoded.
    const captured = "user%3Da%252520b%26k%252526%3Dv%25253D1";
    assert.deepEqual(parseMetadataFilter(decodeURIComponent(captured)), { user: "a b", "k&": "v=1" });
  });
  test("rejects pairs without exactly one '='", () => {
    assert.throws(() => parseMetadataFilter("novalue"), InvalidRequestError);
  });
  test("states default to both and reject unknown ones", () => {
    assert.deepEqual([...parseStates(undefined)], ["running", "paused"]);
    assert.deepEqual([...parseStates("running")], ["running"]);
    assert.throws(() => parseStates("running,zombie"), InvalidRequestError);
  });
  test("cursor round trip and garbage", () => {
    assert.equal(decodeCursor(encodeCursor(42)), 42);
    assert.throws(() => decodeCursor("garbage!!"), InvalidRequestError);
  });
});

describe("proxy target resolution", () => {
  test("E2B headers win over any path, default port is envd's", () => {
    assert.deepEqual(resolveTarget(req("/health", { "e2b-sandbox-id": "iabc" })), {
      sandboxId: "iabc",
      port: ENVD_PORT,
      path: "/health",
      via: "header",
    });
    assert.equal(
      resolveTarget(req("/files?path=x", { "e2b-sandbox-id": "iabc", "e2b-sandbox-port": "8080" }))?.port,
      8080,
    );
  });
  test("host form {port}-{id}.{domain}", () => {
    const t = resolveTarget(req("/x?y=1", { host: "3000-iabc123.sbx.example.com:8000" }));
    assert.deepEqual(t, { sandboxId: "iabc123", port: 3000, path: "/x?y=1", via: "host" });
  });
  test("path form /proxy/{id}/{port}/... and bare /proxy with headers", () => {
    assert.deepEqual(resolveTarget(req("/proxy/iabc/8080/a/b?c=d")), {
      sandboxId: "iabc",
      port: 8080,
      path: "/a/b?c=d",
      via: "path",
    });
    assert.equal(
      resolveTarget(req("/proxy/process.Process/List", { "e2b-sandbox-id": "iabc" }))?.path,
      "/process.Process/List",
    );
    assert.equal(resolveTarget(req("/proxy/garbage"))?.sandboxId, "");
  });
  test("control-plane requests are not proxied", () => {
    assert.equal(resolveTarget(req("/v2/sandboxes", { host: "127.0.0.1:8000" })), undefined);
    assert.equal(resolveTarget(req("/health", { host: "localhost:8000" })), undefined);
  });
  test("routing and hop-by-hop headers are stripped", () => {
    const h = upstreamHeaders(
      req("/", {
        "e2b-sandbox-id": "i",
        "e2b-sandbox-port": "1",
        connection: "keep-alive",
        "x-access-token": "t",
        "x-api-key": "k",
        "x-aenv-gateway-proof": "p",
      }),
      false,
    );
    // Names as E2B's proxy (Go) writes them.
    assert.deepEqual(Object.keys(h).sort(), ["X-Access-Token", "X-Forwarded-For"]);
  });
  test("a signed /files URL names the sandbox whose token signed it", () => {
    const get = (url: string, method = "GET") => ({ ...req(url), method }) as IncomingMessage;
    const sig = computeFileSignature("/a.txt", "read", "user", "tok-b", "99");
    const tokens: Record<string, string> = { ia: "tok-a", ib: "tok-b" };
    const search = (m: (t: string) => boolean) => Object.keys(tokens).find((id) => m(tokens[id] as string));
    const url = `/files?path=%2Fa.txt&username=user&signature=${encodeURIComponent(sig)}&signature_expiration=99`;
    const hit = signedFilesTarget(get(url), search);
    assert.ok(hit && "target" in hit);
    assert.deepEqual(hit.target, { sandboxId: "ib", port: ENVD_PORT, path: url, via: "signature" });
    // The same signature for a write, or another path, is no one's; garbage is not hashed.
    assert.ok("refusal" in (signedFilesTarget(get(url, "POST"), search) ?? {}));
    assert.ok("refusal" in (signedFilesTarget(get(url.replace("a.txt", "b.txt")), search) ?? {}));
    let hashed = 0;
    const counting = (m: (t: string) => boolean) => {
      hashed++;
      return search(m);
    };
    assert.ok("refusal" in (signedFilesTarget(get("/files?path=x&signature=v1_x"), counting) ?? {}));
    assert.equal(hashed, 0);
    assert.equal(signedFilesTarget(get("/files?path=x"), search), undefined);
    assert.equal(signedFilesTarget(get("/v2/sandboxes?signature=x"), search), undefined);
  });
});

describe("misc", () => {
  test("sandbox ids are fixed-length DNS labels", () => {
    for (let i = 0; i < 100; i++) assert.match(newSandboxId(), SANDBOX_ID_RE);
  });
  test("slot addresses are distinct /30s", () => {
    const base = parseCidr16("10.201.0.0/16");
    assert.deepEqual(slotAddresses(base, 0), {
      index: 0,
      hostIp: "10.201.0.1",
      slotIp: "10.201.0.2",
      hostIf: "aenv-h0",
      sandboxNetns: "aenv-s0",
      routerNetns: "aenv-r0",
    });
    assert.equal(slotAddresses(base, 300).slotIp, "10.201.4.178");
    assert.throws(() => parseCidr16("10.0.0.0/8"));
  });
  test("a generated API key has E2B's form (SDK releases that check refuse others)", () => {
    const dir = mkdtempSync(join(tmpdir(), "aenv-key-"));
    try {
      const key = resolveApiKey(dir, {});
      assert.match(key, E2B_KEY_FORM);
      assert.equal(resolveApiKey(dir, {}), key, "kept across starts");
      assert.equal(resolveApiKey(dir, { AENV_API_KEY: "mine" }), "mine");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  test("--listen parsing", () => {
    assert.deepEqual(parseListen("0.0.0.0:8000"), { host: "0.0.0.0", port: 8000 });
    assert.deepEqual(parseListen("[::1]:9"), { host: "::1", port: 9 });
    assert.throws(() => parseListen("8000"));
  });
});
