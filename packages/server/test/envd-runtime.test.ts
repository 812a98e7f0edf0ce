/** The runtime folder mounted at /.aenv (runtime/envd-runtime.ts): content-addressed, its ID remembered. */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { after, describe, it } from "node:test";
import { ENVD_ARGS, envdArgs, prepareEnvdRuntime, runtimeContentId } from "../src/runtime/envd-runtime.js";

describe("envd runtime folder", () => {
  const root = mkdtempSync("/var/tmp/aenv-runtime-test-");
  after(() => rmSync(root, { recursive: true, force: true }));

  it("the content ID follows the bytes, not the times", () => {
    const f = join(root, "input");
    writeFileSync(f, "one");
    const a = runtimeContentId([f]);
    utimesSync(f, new Date(1_000_000), new Date(1_000_000));
    assert.equal(runtimeContentId([f]), a);
    writeFileSync(f, "two");
    assert.notEqual(runtimeContentId([f]), a);
  });

  it("a start with unchanged inputs takes the remembered folder without reading them; a stale memo is ignored", () => {
    const rt = join(root, "rt");
    const dir = prepareEnvdRuntime(rt);
    assert.ok(existsSync(join(dir, ".complete")) && existsSync(join(dir, "bin", "envd")));
    assert.ok(!existsSync(join(dir, "bin", "node")), "no node in the runtime folder");
    assert.deepEqual(JSON.parse(readFileSync(join(dir, "args.json"), "utf8")), ENVD_ARGS);
    const memoFile = join(rt, ".ids-native.json");
    const memo = JSON.parse(readFileSync(memoFile, "utf8")) as { entries: Record<string, string> };
    const [key, value] = Object.entries(memo.entries)[0] ?? [];
    assert.ok(key);
    assert.equal(value, basename(dir));
    const remember = (k: string, v: string) => writeFileSync(memoFile, JSON.stringify({ entries: { [k]: v } }));
    // The memo is believed: pointed at another complete folder, the next start takes it (no hash).
    const other = "0123456789abcdef";
    mkdirSync(join(rt, other));
    writeFileSync(join(rt, other, ".complete"), "");
    remember(key, other);
    assert.equal(prepareEnvdRuntime(rt), join(rt, other));
    // A memo for other inputs (or naming a folder that is not there) is not: the content decides.
    remember("stale", other);
    assert.equal(prepareEnvdRuntime(rt), dir);
    remember(key, "fedcba9876543210");
    assert.equal(prepareEnvdRuntime(rt), dir);
    writeFileSync(memoFile, "not json");
    assert.equal(prepareEnvdRuntime(rt), dir);
  });

  it("a folder says what its PID 1 runs; one that does not is refused, not guessed", () => {
    const old = join(root, "old");
    mkdirSync(old);
    writeFileSync(join(old, "args.json"), JSON.stringify(["/.aenv/bin/aenv-init", "/.aenv/bin/other"]));
    assert.deepEqual(envdArgs(old), ["/.aenv/bin/aenv-init", "/.aenv/bin/other"]);
    const none = join(root, "none");
    mkdirSync(none);
    assert.throws(() => envdArgs(none), /no readable args\.json/);
  });
});
