// The undo of a start (orchestrator/cleanup-stack.ts): steps run newest first, a step that
// fails is logged and the rest still run, and a released stack undoes nothing. The start
// paths that use it are exercised failing part way in sim-lifecycle.test.ts.
import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { CleanupStack } from "../src/orchestrator/cleanup-stack.js";

/** A logger whose warnings land in `lines`. */
function recording() {
  const lines: Array<Record<string, unknown>> = [];
  const log = pino({ level: "warn" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { log, lines };
}

test("unwind runs the steps newest first, awaiting each", async () => {
  const { log } = recording();
  const undo = new CleanupStack(log);
  const ran: string[] = [];
  undo.defer("slot", () => ran.push("slot"));
  undo.defer("runtime", async () => {
    await new Promise((r) => setTimeout(r, 5));
    ran.push("runtime");
  });
  undo.defer("record", () => ran.push("record"));
  assert.equal(undo.size, 3);
  await undo.unwind();
  assert.deepEqual(ran, ["record", "runtime", "slot"]);
  assert.equal(undo.size, 0);
  await undo.unwind();
  assert.deepEqual(ran, ["record", "runtime", "slot"], "a second unwind runs nothing again");
});

test("a failing step is logged with the stack's bindings and the rest still run", async () => {
  const { log, lines } = recording();
  const undo = new CleanupStack(log, { sandboxID: "s1" });
  const ran: string[] = [];
  undo.defer("admission", () => ran.push("admission"));
  undo.defer("record", () => {
    throw new Error("store is read-only");
  });
  undo.defer("runtime", async () => {
    throw new Error("runtime gone");
  });
  await undo.unwind();
  assert.deepEqual(ran, ["admission"]);
  assert.deepEqual(
    lines.map((l) => [l.msg, l.step, l.sandboxID, (l.err as { message: string }).message]),
    [
      ["rollback step failed", "runtime", "s1", "runtime gone"],
      ["rollback step failed", "record", "s1", "store is read-only"],
    ],
  );
});

test("release drops the steps: nothing is undone afterwards", async () => {
  const { log } = recording();
  const undo = new CleanupStack(log);
  let ran = 0;
  undo.defer("runtime", () => ran++);
  undo.release();
  assert.equal(undo.size, 0);
  await undo.unwind();
  assert.equal(ran, 0);
});
