/**
 * A command's output that is still unread when its exit was seen is sent before its end, even
 * when envd was too busy to read it within the exit's flush window (process/handle.ts).
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { type ProcEvent, ProcessHandle } from "../src/process/handle.js";
import type { ChildLike, Spawner } from "../src/process/spawner.js";

/** Two connected unix-socket pairs: the child's stdout and stderr, and the ends that write them. */
async function socketPairs(dir: string): Promise<{ ours: Socket[]; theirs: Socket[]; close(): void }> {
  const theirs: Socket[] = [];
  const server = createServer((s) => theirs.push(s));
  const file = path.join(dir, "s");
  await new Promise<void>((r) => server.listen(file, r));
  const ours: Socket[] = [];
  for (let i = 0; i < 2; i++) {
    const c = connect(file);
    await new Promise<void>((r) => c.once("connect", () => r()));
    ours.push(c);
  }
  while (theirs.length < 2) await new Promise((r) => setImmediate(r));
  return { ours, theirs, close: () => server.close() };
}

describe("a command's last output", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "envd-exit-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("is sent before its end when envd reads it only after the flush window", async () => {
    const pairs = await socketPairs(dir);
    const child = Object.assign(new EventEmitter(), {
      pid: 424242,
      stdout: pairs.ours[0] as Socket,
      stderr: pairs.ours[1] as Socket,
      stdin: null,
    }) as unknown as ChildLike & EventEmitter;
    const spawner = { usable: true, spawn: async () => child } as unknown as Spawner;
    const events: ProcEvent[] = [];
    const ended = new Promise<void>((resolve) => {
      void ProcessHandle.spawn(
        { config: { cmd: "cat", args: [], envs: {} }, cwd: "/", env: {}, uid: 0, gid: 0, stdin: false },
        (ev) => {
          events.push(ev);
          if (ev.kind === "end") resolve();
        },
        spawner,
      );
    });
    await new Promise((r) => setImmediate(r));
    // The exit is seen; the command's last words reach envd's socket, but envd is busy for
    // longer than the flush window before its loop gets to read them.
    child.emit("exit", 1, null);
    (pairs.theirs[1] as Socket).write("cat: no such file\n");
    const until = Date.now() + 400;
    while (Date.now() < until) {
      // busy: no I/O is read meanwhile
    }
    await ended;
    pairs.close();
    for (const s of [...pairs.ours, ...pairs.theirs]) s.destroy();
    const err = events.flatMap((e) => (e.kind === "data" && e.stream === "stderr" ? [Buffer.from(e.data)] : []));
    assert.equal(Buffer.concat(err).toString(), "cat: no such file\n");
    assert.equal(events.at(-1)?.kind, "end");
  });
});
