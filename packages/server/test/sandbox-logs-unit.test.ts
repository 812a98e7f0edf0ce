import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { REGION, readConsole } from "../src/orchestrator/console-reader.js";
import { type ConsoleEntry, consoleEntry, type LogsFilter, mergeLogs } from "../src/orchestrator/sandbox-logs.js";

const dir = mkdtempSync(join(tmpdir(), "aenv-console-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function consoleOf(text: string): string {
  const f = join(dir, `c${n++}`);
  writeFileSync(f, text);
  return f;
}
const stamp = (ms: number) => {
  const d = new Date(ms).toISOString();
  return `envd: ${d.slice(0, 4)}/${d.slice(5, 7)}/${d.slice(8, 10)} ${d.slice(11, 19)}.${d.slice(20, 23)}000`;
};
const read = async (file: string, f: Partial<LogsFilter>) =>
  (await readConsole(file, { limit: 1000, direction: "forward", ...f })) ?? [];

test("console lines: envd's stamps parsed, unstamped lines take the time before them, long lines cut", async () => {
  const text = [
    "no stamp yet",
    "envd: 2026/12/03 11:25:01.500000 listening on 0.0.0.0:49983",
    "  continued",
    "envd: 2026/12/03 11:25:02.000000 warn: sudo service not started: x",
    "envd: 2026/12/03 11:25:03.000000 serve: failed hard",
    `envd: 2026/12/03 11:25:04.000000 ${"y".repeat(5000)}`,
    "",
  ].join("\n");
  const got = await read(consoleOf(text), {});
  assert.deepEqual(
    got.map((e) => [e.timestamp, e.level, e.message.slice(0, 30)]),
    [
      ["2026-12-03T11:25:01.500Z", "info", "no stamp yet"],
      ["2026-12-03T11:25:01.500Z", "info", "listening on 0.0.0.0:49983"],
      ["2026-12-03T11:25:01.500Z", "info", "  continued"],
      ["2026-12-03T11:25:02.000Z", "warn", "warn: sudo service not started"],
      ["2026-12-03T11:25:03.000Z", "error", "serve: failed hard"],
      ["2026-12-03T11:25:04.000Z", "info", "y".repeat(30)],
    ],
  );
  assert.ok((got[5]?.message.length ?? 0) <= 4097);
  // A console with no stamp at all: the file's last write. No file: nothing.
  const plain = consoleOf("plain\n");
  assert.ok(Math.abs((await read(plain, {}))[0]?.ms ?? 0) > 0);
  assert.equal(await readConsole(join(dir, "none"), { limit: 10, direction: "forward" }), undefined);
});

test("filters: cursor both ways, minimum level, search, limit", async () => {
  const file = consoleOf(
    `${["a", "warn: x", "failed", "d"].map((l, i) => `envd: 2026/12/03 00:00:0${i} ${l}`).join("\n")}\n`,
  );
  const t = (i: number) => Date.parse(`2026-12-03T00:00:0${i}Z`);
  assert.equal((await read(file, { cursor: t(2) })).length, 2);
  assert.deepEqual(
    (await read(file, { limit: 2, direction: "backward", cursor: t(2) })).map((e) => e.ms),
    [t(2), t(1)],
  );
  assert.deepEqual(
    (await read(file, { level: "warn" })).map((e) => e.level),
    ["warn", "error"],
  );
  assert.equal((await read(file, { search: "failed" })).length, 1);
  assert.equal((await read(file, { limit: 0 })).length, 0);
});

test("a full console is read one region at a time: the newest lines, a cursor deep inside, never the whole file", async () => {
  const t0 = Date.parse("2026-12-03T00:00:00Z");
  // 6 MiB: stamped lines a second apart, each followed by ~60 KiB of one-byte lines.
  const parts: string[] = [];
  for (let i = 0; i < 100; i++) parts.push(`${stamp(t0 + i * 1000)} tick ${i}\n`, "a\n".repeat(30_000));
  parts.push("last line\n");
  const file = consoleOf(parts.join(""));
  const newest = await read(file, { direction: "backward", limit: 3 });
  assert.deepEqual(
    newest.map((e) => [e.message, e.ms]),
    [
      ["last line", t0 + 99_000],
      ["a", t0 + 99_000],
      ["a", t0 + 99_000],
    ],
  );
  // Forward from a cursor deep in the file: found by the stamps, not by reading up to it.
  const from = await read(file, { cursor: t0 + 70_000, limit: 2 });
  assert.deepEqual(
    from.map((e) => [e.message, e.ms]),
    [
      ["tick 70", t0 + 70_000],
      ["a", t0 + 70_000],
    ],
  );
  const back = await read(file, { direction: "backward", cursor: t0 + 40_500, limit: 1, search: "tick" });
  assert.deepEqual(
    back.map((e) => e.message),
    ["tick 40"],
  );
  // One call reads one region: from the start, far fewer entries than the file holds.
  const all = await read(file, { limit: 100_000 });
  assert.ok(all.length > 0 && all.length <= REGION / 2, String(all.length));
  assert.ok(all.every((e, i) => i === 0 || e.ms >= (all[i - 1] as ConsoleEntry).ms));
});

test("the server's own entries and the console's merge in time, in the direction asked", () => {
  const book = [consoleEntry(10, "created"), consoleEntry(30, "paused")];
  const console = [consoleEntry(20, "envd up"), consoleEntry(40, "envd down")];
  assert.deepEqual(
    mergeLogs(book, console, { limit: 10, direction: "forward" }).map((e) => e.message),
    ["created", "envd up", "paused", "envd down"],
  );
  assert.deepEqual(
    mergeLogs(book, [...console].reverse(), { limit: 3, direction: "backward" }).map((e) => e.message),
    ["envd down", "paused", "envd up"],
  );
});
