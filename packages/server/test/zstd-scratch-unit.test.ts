import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { compress, decompress, sweepScratch } from "../src/storage/repository/zstd.js";

const root = mkdtempSync(join(tmpdir(), "aenv-scratch-"));
after(() => rmSync(root, { recursive: true, force: true }));

/** The PID of a process that has exited. */
async function deadPid(): Promise<number> {
  const p = spawn("true");
  await new Promise((r) => p.once("exit", r));
  return p.pid as number;
}

test("scratch folders of dead processes, and old unnamed ones, are removed; live and recent ones stay", async () => {
  const live = spawn("sleep", ["60"], { stdio: "ignore" });
  try {
    const dirs = {
      dead: `aenv-zstd-${await deadPid()}-aaaaaa`,
      live: `aenv-zstd-${live.pid}-bbbbbb`,
      own: `aenv-zstd-${process.pid}-cccccc`,
      oldUnnamed: "aenv-zstd-Xy12ab",
      newUnnamed: "aenv-zstd-Zq34cd",
      other: "something-else",
    };
    for (const d of Object.values(dirs)) mkdirSync(join(root, d));
    const twoHoursAgo = new Date(Date.now() - 2 * 3_600_000);
    utimesSync(join(root, dirs.oldUnnamed), twoHoursAgo, twoHoursAgo);
    assert.equal(await sweepScratch(root), 2);
    const left = (d: string) => existsSync(join(root, d));
    assert.deepEqual(Object.fromEntries(Object.entries(dirs).map(([k, d]) => [k, left(d)])), {
      dead: false,
      live: true,
      own: true,
      oldUnnamed: false,
      newUnnamed: true,
      other: true,
    });
  } finally {
    live.kill("SIGKILL");
  }
});

test("a batch still round-trips with the named scratch folders", async () => {
  const data = Buffer.from("aenv ".repeat(1000));
  assert.deepEqual(await decompress(await compress(data)), data);
});
