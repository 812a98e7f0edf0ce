/** Pure helpers: mode strings, signatures, paths, argv, Basic auth, status strings. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { computeFileSignature as computeSignature } from "@aenv/protocol";
import { getSignature } from "e2b";
import { parseArgs } from "../src/args.js";
import { checkFilesAuth } from "../src/auth.js";
import { countExternal } from "../src/external-tcp.js";
import { goModeString } from "../src/filesystem/entry.js";
import { metadataFromHeaders } from "../src/filesystem/metadata.js";
import { resolvePath } from "../src/paths.js";
import { endFromExit } from "../src/process/signals.js";
import { parsePasswd, usernameFromBasicAuth } from "../src/users.js";

describe("units", () => {
  it("external TCP connections from /proc/net/tcp and tcp6", () => {
    const v4 = [
      "  sl  local_address rem_address   st tx_queue rx_queue",
      "   0: 00000000:C33F 00000000:0000 0A 00000000:00000000", // envd listening
      "   1: 1500FEA9:C33F 0100D60A:BC3C 01 00000000:00000000", // the host's call to envd
      "   2: 1500FEA9:1F40 0100D60A:A000 01 00000000:00000000", // a client outside: counts
      "   3: 0100007F:1F40 0100007F:A001 01 00000000:00000000", // loopback
      "   4: 1500FEA9:9C40 08080808:01BB 06 00000000:00000000", // TIME_WAIT
      "   5: 1500FEA9:9C41 08080808:01BB 01 00000000:00000000", // out to 8.8.8.8:443: counts
    ].join("\n");
    assert.equal(countExternal(v4, 49983), 2);
    const v6 = [
      "  sl  local_address                         remote_address                        st",
      "   0: 00000000000000000000000001000000:1F40 00000000000000000000000001000000:A000 01", // ::1
      "   1: 0000000000000000FFFF00000100007F:1F40 0000000000000000FFFF00000100007F:A001 01", // mapped 127.0.0.1
      "   2: 0000000000000000FFFF00001500FEA9:1F40 0000000000000000FFFF00000100D60A:A002 01", // mapped, outside
    ].join("\n");
    assert.equal(countExternal(v6, 49983), 1);
    assert.equal(countExternal("", 49983), 0);
  });

  it("Go FileMode strings", () => {
    assert.equal(goModeString(0o100644), "-rw-r--r--");
    assert.equal(goModeString(0o040755), "drwxr-xr-x");
    assert.equal(goModeString(0o120777), "Lrwxrwxrwx");
    assert.equal(goModeString(0o041777), "dtrwxrwxrwx");
    assert.equal(goModeString(0o104755), "urwxr-xr-x");
    assert.equal(goModeString(0o020620), "Dcrw--w----");
    assert.equal(goModeString(0o010600), "prw-------");
    assert.equal(goModeString(0o140755), "Srwxr-xr-x");
  });

  it("signatures match the SDK's getSignature", async () => {
    const sdk = await getSignature({ path: "/a b.txt", operation: "read", user: "root", envdAccessToken: "tok" });
    assert.equal(computeSignature("/a b.txt", "read", "root", "tok"), sdk.signature);
    const withExp = await getSignature({
      path: "x",
      operation: "write",
      user: undefined,
      expirationInSeconds: 30,
      envdAccessToken: "tok",
    });
    assert.equal(computeSignature("x", "write", "", "tok", String(withExp.expiration)), withExp.signature);
    const q = new URLSearchParams({
      path: "x",
      signature: withExp.signature,
      signature_expiration: String(withExp.expiration),
    });
    assert.deepEqual(checkFilesAuth("tok", undefined, q, "write"), { ok: true });
    assert.equal(checkFilesAuth("tok", undefined, q, "read").ok, false);
    assert.equal(checkFilesAuth("tok", undefined, q, "write", Date.now() + 3_600_000).ok, false, "expired");
    assert.equal(checkFilesAuth("tok", "bad", q, "write").ok, false, "a present header must match");
    assert.deepEqual(checkFilesAuth(undefined, undefined, new URLSearchParams(), "read"), { ok: true });
  });

  it("paths", () => {
    const u = { name: "user", uid: 1000, gid: 1000, home: "/home/user", shell: "/bin/bash" };
    assert.equal(resolvePath("", u, "/work"), "/work");
    assert.equal(resolvePath("", u, undefined), "/home/user");
    assert.equal(resolvePath("~", u, undefined), "/home/user");
    assert.equal(resolvePath("~/a/../b", u, undefined), "/home/user/b");
    assert.equal(resolvePath("rel/c.txt", u, "/work"), "/home/user/rel/c.txt");
    assert.equal(resolvePath("/abs//x/", u, "/work"), "/abs/x");
  });

  it("argv, basic auth, passwd, status strings, metadata", () => {
    assert.deepEqual(parseArgs([]), { port: 49983, host: "0.0.0.0" });
    assert.deepEqual(parseArgs(["--port", "1234", "--host=127.0.0.1"]), { port: 1234, host: "127.0.0.1" });
    assert.throws(() => parseArgs(["--port", "x"]));
    assert.equal(usernameFromBasicAuth("Basic cm9vdDo="), "root");
    assert.equal(usernameFromBasicAuth(undefined), undefined);
    assert.equal(usernameFromBasicAuth(`Basic ${Buffer.from(":").toString("base64")}`), undefined);
    assert.deepEqual(parsePasswd("root:x:0:0:root:/root:/bin/bash\n#c\nbad\n"), [
      { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" },
    ]);
    assert.deepEqual(endFromExit(0, null), { exitCode: 0, exited: true, status: "exit status 0" });
    assert.deepEqual(endFromExit(2, null), {
      exitCode: 2,
      exited: true,
      status: "exit status 2",
      error: "exit status 2",
    });
    assert.deepEqual(endFromExit(null, "SIGTERM"), {
      exitCode: -1,
      exited: false,
      status: "signal: terminated",
      error: "signal: terminated",
    });
    assert.deepEqual(endFromExit(0, 9), {
      exitCode: -1,
      exited: false,
      status: "signal: killed",
      error: "signal: killed",
    });
    assert.deepEqual(metadataFromHeaders({ "x-metadata-owner": "me", host: "h" }), { ok: true, meta: { owner: "me" } });
    assert.equal(metadataFromHeaders({ "x-metadata-k": "é" }).ok, false);
    assert.equal(metadataFromHeaders({ "x-metadata-k": "v".repeat(5000) }).ok, false);
  });
});
