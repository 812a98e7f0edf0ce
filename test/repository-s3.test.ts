// The server with the s3 repository backend against a real S3-compatible server (s3rver on
// loopback): pause/resume and snapshots go through the bucket, a second server starts a
// snapshot from it with a cold cache, and bad S3 settings stop the server with one line.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { S3_CREDENTIALS, startS3, type TestS3 } from "../packages/server/test/helpers/s3.js";
import { cleanupDataDir, ROOT, sdkOptions, startServer, type TestServer, untilCommitted } from "./helpers/server.js";

let s3: TestS3;
let a: TestServer;
let b: TestServer;
let env: Record<string, string>;

const on = sdkOptions;

before(async () => {
  s3 = await startS3("aenv-e2e");
  env = {
    AENV_REPOSITORY_BACKEND: "s3",
    AENV_S3_ENDPOINT: s3.endpoint,
    AENV_S3_BUCKET: s3.bucket,
    AENV_S3_REGION: "us-east-1",
    AENV_S3_PREFIX: "node-shared/",
    AENV_S3_FORCE_PATH_STYLE: "true",
    AWS_ACCESS_KEY_ID: S3_CREDENTIALS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: S3_CREDENTIALS.secretAccessKey,
    AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
    AENV_GC_INTERVAL: "0",
  };
  a = await startServer({ env: { ...env, AENV_NET_PREFIX: "aev", AENV_SLOT_CIDR: "10.207.0.0/16" } });
  b = await startServer({ env: { ...env, AENV_NET_PREFIX: "aew", AENV_SLOT_CIDR: "10.208.0.0/16" } });
});

after(async () => {
  await Promise.all([a.stop(), b.stop()]);
  cleanupDataDir(a);
  cleanupDataDir(b);
  await s3.close();
});

describe("the s3 repository backend, end to end", () => {
  test("a snapshot committed to S3 on A starts on B; pause images go to the bucket too", async () => {
    const src = await Sandbox.create({ ...on(a), timeoutMs: 120_000 });
    await src.commands.run("echo in-s3 > /home/user/s3.txt");
    const snap = (await a.api("POST", `/sandboxes/${src.sandboxId}/snapshots`, { name: "s3-snap" })).body as {
      snapshotID: string;
    };
    assert.ok((await untilCommitted(a, snap.snapshotID)).uploadedBytes > 0);
    await src.pause();
    await new Promise((r) => setTimeout(r, 500));
    const resumed = await Sandbox.connect(src.sandboxId, on(a));
    assert.equal((await resumed.commands.run("cat /home/user/s3.txt")).stdout, "in-s3\n");
    await resumed.kill();

    const onB = await Sandbox.create("s3-snap", on(b));
    assert.equal((await onB.commands.run("cat /home/user/s3.txt")).stdout, "in-s3\n");
    await onB.kill();
    assert.equal((await b.api("DELETE", `/templates/${snap.snapshotID}`)).status, 204);
    assert.equal((await a.api("POST", "/sandboxes", { templateID: snap.snapshotID })).status, 404);
  });

  test("bad S3 settings stop the server at start with one clear line", async () => {
    const startFails = (extra: Record<string, string>) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const dataDir = mkdtempSync("/var/tmp/aenv-test-");
        const p = spawn(
          process.execPath,
          [join(ROOT, "packages/server/bin/aenv-server.js"), "--listen", "127.0.0.1:0", "--data-dir", dataDir],
          { env: { ...process.env, ...env, AENV_NET_PREFIX: "aex", ...extra }, stdio: ["ignore", "pipe", "pipe"] },
        );
        let out = "";
        p.stdout.on("data", (d: Buffer) => (out += d.toString()));
        p.stderr.on("data", (d: Buffer) => (out += d.toString()));
        const t = setTimeout(() => p.kill("SIGKILL"), 30_000);
        p.on("exit", (code) => {
          clearTimeout(t);
          rmSync(dataDir, { recursive: true, force: true });
          resolve({ code, out });
        });
      });
    const noRegion = await startFails({ AENV_S3_REGION: "" });
    assert.notEqual(noRegion.code, 0);
    assert.match(noRegion.out, /needs an explicit region/);
    const noBucket = await startFails({ AENV_S3_BUCKET: "no-such-bucket" });
    assert.notEqual(noBucket.code, 0);
    assert.match(noBucket.out, /no-such-bucket.*(does not exist|NoSuchBucket)/i);
  });
});
