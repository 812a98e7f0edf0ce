import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createServer } from "node:net";
import { describe, test } from "node:test";
import { probeReadyCmd, templateNameFromImage } from "../src/images.js";

const sh = (cmd: string) => spawnSync("/bin/sh", ["-c", cmd]).status;

describe("--probe PORT → ready command", () => {
  test("passes when something listens on the port, fails otherwise (POSIX sh, no tools)", async () => {
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const addr = srv.address();
    const port = typeof addr === "object" && addr ? addr.port : 0;
    try {
      assert.equal(sh(probeReadyCmd(port)), 0);
    } finally {
      await new Promise((r) => srv.close(r));
    }
    assert.equal(sh(probeReadyCmd(port)), 1);
    // busybox sh stands in for the smallest images.
    if (spawnSync("busybox", ["true"]).status === 0) {
      assert.equal(spawnSync("busybox", ["sh", "-c", probeReadyCmd(port)]).status, 1);
    }
  });
  test("the port is matched in hex, exactly", () => {
    assert.match(probeReadyCmd(8080), / = 1F90 /);
    assert.match(probeReadyCmd(80), / = 0050 /);
    assert.throws(() => probeReadyCmd(0), /port number/);
    assert.throws(() => probeReadyCmd(70000), /port number/);
  });
});

describe("template names from image references", () => {
  test("the repository's last path part, without tag or digest", () => {
    assert.equal(templateNameFromImage("python:3.12-slim"), "python");
    assert.equal(templateNameFromImage("127.0.0.1:5000/team/web:1"), "web");
    assert.equal(templateNameFromImage(`ghcr.io/o/app@sha256:${"a".repeat(64)}`), "app");
    assert.equal(templateNameFromImage("localhost:5000/tiny"), "tiny");
    assert.throws(() => templateNameFromImage("registry:5000/"), /pass --name/);
  });
});
