import assert from "node:assert/strict";
import { test } from "node:test";
import { filterLogs, parseConsole } from "../src/orchestrator/sandbox-logs.js";

test("console lines: envd's stamps parsed, unstamped lines take the time before them, long lines cut", () => {
  const text = [
    "no stamp yet",
    "envd: 2026/12/03 11:25:01.500000 listening on 0.0.0.0:49983",
    "  continued",
    "envd: 2026/12/03 11:25:02.000000 warn: sudo service not started: x",
    "envd: 2026/12/03 11:25:03.000000 serve: failed hard",
    `envd: 2026/12/03 11:25:04.000000 ${"y".repeat(5000)}`,
    "",
  ].join("\n");
  const got = parseConsole(text, new Date("2026-12-03T12:00:00Z"));
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
  // A console with no stamp at all: the file's last write.
  assert.equal(parseConsole("plain\n", new Date(5000))[0]?.ms, 5000);
});

test("filters: cursor both ways, minimum level, search, limit", () => {
  const all = parseConsole(
    ["a 1", "b 2 warn: x", "c 3 failed", "d 4"]
      .map((l, i) => `envd: 2026/12/03 00:00:0${i} ${l.replace(/^\w \d /, "")}`)
      .join("\n"),
    new Date(0),
  );
  const t = (i: number) => Date.parse(`2026-12-03T00:00:0${i}Z`);
  assert.equal(filterLogs(all, { limit: 10, direction: "forward", cursor: t(2) }).length, 2);
  assert.deepEqual(
    filterLogs(all, { limit: 2, direction: "backward", cursor: t(2) }).map((e) => e.timestamp),
    [new Date(t(2)).toISOString(), new Date(t(1)).toISOString()],
  );
  assert.deepEqual(
    filterLogs(all, { limit: 10, direction: "forward", level: "warn" }).map((e) => e.level),
    ["warn", "error"],
  );
  assert.equal(filterLogs(all, { limit: 10, direction: "forward", search: "failed" }).length, 1);
  assert.equal(filterLogs(all, { limit: 0, direction: "forward" }).length, 0);
});
