/** runsc's probe answer, remembered per boot and binary (runtime/gvisor/probe-memo.ts). */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { probeKey, rememberedPlatform, rememberPlatform } from "../src/runtime/gvisor/probe-memo.js";

describe("runsc probe memo", () => {
  const dir = mkdtempSync("/var/tmp/aenv-probe-memo-test-");
  after(() => rmSync(dir, { recursive: true, force: true }));
  const bin = join(dir, "runsc");
  const memo = join(dir, "run", "runsc-probe.json");
  writeFileSync(bin, "one");

  it("is used for the same binary and question only", () => {
    const key = probeKey(bin, "v1\0auto");
    assert.ok(key);
    assert.equal(rememberedPlatform(key, ["systrap", "ptrace"], memo), undefined, "nothing remembered yet");
    rememberPlatform(key, "systrap", memo);
    assert.equal(rememberedPlatform(key, ["systrap", "ptrace"], memo), "systrap");
    // Another question, or a platform that is not asked for now: probe again.
    assert.equal(rememberedPlatform(probeKey(bin, "v1\0ptrace"), ["ptrace"], memo), undefined);
    assert.equal(rememberedPlatform(key, ["ptrace"], memo), undefined);
    // The binary replaced or rewritten: another key.
    writeFileSync(bin, "two");
    assert.notEqual(probeKey(bin, "v1\0auto"), key);
    assert.equal(probeKey(join(dir, "missing"), "v1\0auto"), undefined);
  });

  it("keeps the answers to different questions side by side, the newest 16", () => {
    const measured = probeKey(bin, "v1\0auto-measured");
    const named = probeKey(bin, "v1\0systrap");
    rememberPlatform(measured, "ptrace", memo);
    rememberPlatform(named, "systrap", memo);
    assert.equal(rememberedPlatform(measured, ["systrap", "ptrace"], memo), "ptrace");
    assert.equal(rememberedPlatform(named, ["systrap"], memo), "systrap");
    for (let i = 0; i < 16; i++) rememberPlatform(probeKey(bin, `v${i}\0other`), "systrap", memo);
    assert.equal(rememberedPlatform(measured, ["systrap", "ptrace"], memo), undefined, "the oldest made room");
  });

  it("garbage in the file is ignored", () => {
    const key = probeKey(bin, "v1\0auto");
    writeFileSync(memo, "not json");
    assert.equal(rememberedPlatform(key, ["systrap"], memo), undefined);
    writeFileSync(memo, JSON.stringify({ entries: { [key as string]: ["systrap"] } }));
    assert.equal(rememberedPlatform(key, ["systrap"], memo), undefined);
    writeFileSync(memo, JSON.stringify({ key, value: "systrap" }));
    assert.equal(rememberedPlatform(key, ["systrap"], memo), undefined, "the older single-entry form");
  });
});
