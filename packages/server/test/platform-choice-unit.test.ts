/** Which gVisor platform `auto` takes (runtime/gvisor/platform-choice.ts): measured, then kept per data dir. */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  chooseFaster,
  pinnedPlatform,
  recordedPlatform,
  recordPlatform,
} from "../src/runtime/gvisor/platform-choice.js";

const sys = (loopMs?: number) => ({
  platform: "systrap",
  ok: true,
  startMs: 300,
  ...(loopMs === undefined ? {} : { loopMs }),
});
const pt = (loopMs?: number) => ({
  platform: "ptrace",
  ok: true,
  startMs: 300,
  ...(loopMs === undefined ? {} : { loopMs }),
});
const broken = (platform: string) => ({ platform, ok: false, error: "no" });

test("ptrace only when its fork+exec loop is clearly faster; systrap otherwise", () => {
  assert.equal(chooseFaster([sys(600), pt(300)]), "ptrace");
  assert.equal(chooseFaster([sys(600), pt(480)]), "ptrace", "at the margin");
  assert.equal(chooseFaster([sys(600), pt(500)]), "systrap", "a little faster is not enough");
  assert.equal(chooseFaster([sys(300), pt(600)]), "systrap");
  assert.equal(chooseFaster([sys(600), pt()]), "systrap", "ptrace's loop failed");
  assert.equal(chooseFaster([sys(), pt(600)]), "ptrace", "systrap's loop failed");
});

test("a platform that does not start is never chosen; none starting is no choice", () => {
  assert.equal(chooseFaster([broken("systrap"), pt(900)]), "ptrace");
  assert.equal(chooseFaster([sys(100), broken("ptrace")]), "systrap");
  assert.equal(chooseFaster([broken("systrap"), broken("ptrace")]), undefined);
});

test("a data dir keeps its recorded platform; one with state from before the record keeps auto's old order", () => {
  const dir = mkdtempSync(join(tmpdir(), "aenv-platform-"));
  try {
    const rec = join(dir, "runtime-platform");
    const state = join(dir, "state.db");
    assert.equal(pinnedPlatform(rec, state), undefined, "new: measured");
    writeFileSync(state, "");
    assert.deepEqual(pinnedPlatform(rec, state)?.candidates, ["systrap", "ptrace"]);
    recordPlatform(rec, "ptrace");
    assert.equal(recordedPlatform(rec), "ptrace");
    // Each start records again: unchanged, the file is not rewritten (a rewrite is a new inode).
    const ino = statSync(rec).ino;
    recordPlatform(rec, "ptrace");
    assert.equal(statSync(rec).ino, ino);
    assert.deepEqual(pinnedPlatform(rec, state)?.candidates, ["ptrace"]);
    writeFileSync(rec, "kvm-or-garbage\n");
    assert.equal(recordedPlatform(rec), undefined, "only a known platform counts");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
