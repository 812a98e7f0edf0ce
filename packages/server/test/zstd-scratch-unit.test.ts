import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { compress, decompress, sweepScratch } from "../src/storage/repository/zstd.js";
import { SELF, startOf } from "../src/util/process-identity.js";

const root = mkdtempSync(join(tmpdir(), "aenv-scratch-"));
after(() => rmSync(root, { recursive: true, force: true }));

/** The PID of a process that has exited. */
async function deadPid(): Promise<number> {
  const p = spawn("true");
  await new Promise((r) => p.once("exit", r));
  return p.pid as number;
}

const ns = SELF.ns as string;
const twoHoursAgo = new Date(Date.now() - 2 * 3_600_000);

test("scratch folders of gone processes go; a live process's, another namespace's and other users' stay", async () => {
  const live = spawn("sleep", ["60"], { stdio: "ignore" });
  try {
    const livePid = live.pid as number;
    const liveStart = startOf(livePid) as string;
    assert.ok(liveStart);
    const victim = mkdtempSync(join(tmpdir(), "aenv-scratch-victim-"));
    const dirs = {
      dead: `aenv-zstd-${ns}-${await deadPid()}-${liveStart}-aaaaaa`,
      live: `aenv-zstd-${ns}-${livePid}-${liveStart}-bbbbbb`,
      // The PID now belongs to a process that started after the folder's owner.
      reusedPid: `aenv-zstd-${ns}-${livePid}-${Number(liveStart) - 100}-cccccc`,
      own: `aenv-zstd-${ns}-${SELF.pid}-${SELF.start}-dddddd`,
      otherNsFresh: `aenv-zstd-1${ns}-${await deadPid()}-5-eeeeee`,
      otherNsOld: `aenv-zstd-1${ns}-${await deadPid()}-5-ffffff`,
      oldUnnamed: "aenv-zstd-Xy12ab",
      newUnnamed: "aenv-zstd-Zq34cd",
      otherUser: `aenv-zstd-${ns}-${await deadPid()}-5-gggggg`,
      other: "something-else",
    };
    for (const d of Object.values(dirs)) mkdirSync(join(root, d));
    for (const d of [dirs.otherNsOld, dirs.oldUnnamed]) utimesSync(join(root, d), twoHoursAgo, twoHoursAgo);
    chownSync(join(root, dirs.otherUser), 65534, 65534);
    // Planted by a local user in the world-writable /dev/shm: never followed.
    const link = `aenv-zstd-${ns}-${await deadPid()}-5-hhhhhh`;
    mkdirSync(join(victim, "keep"));
    symlinkSync(victim, join(root, link));
    try {
      assert.equal(await sweepScratch(root), 4);
      const left = (d: string) => existsSync(join(root, d));
      assert.deepEqual(Object.fromEntries(Object.entries(dirs).map(([k, d]) => [k, left(d)])), {
        dead: false,
        live: true,
        reusedPid: false,
        own: true,
        otherNsFresh: true,
        otherNsOld: false,
        oldUnnamed: false,
        newUnnamed: true,
        otherUser: true,
        other: true,
      });
      assert.ok(existsSync(join(victim, "keep")), "a planted symlink was followed");
    } finally {
      rmSync(victim, { recursive: true, force: true });
    }
  } finally {
    live.kill("SIGKILL");
  }
});

test("another process's batches survive sweeps running beside them", async () => {
  // A second process doing real batches in the shared scratch root (as another server or a
  // CLI command would), swept from here all the while.
  const code = `
    const { compress, decompress } = await import(${JSON.stringify(join(import.meta.dirname, "../src/storage/repository/zstd.ts"))});
    const data = Buffer.from("aenv ".repeat(200000));
    const until = Date.now() + 3000;
    let n = 0;
    while (Date.now() < until) {
      const out = await Promise.all([1, 2, 3].map(async () => decompress(await compress(data))));
      if (!out.every((b) => b.equals(data))) throw new Error("round trip differs");
      n++;
    }
    console.log("rounds", n);`;
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const exited = new Promise<number | null>((r) => child.once("exit", r));
  let sweeps = 0;
  let seen = 0;
  for (let done = false; !done; sweeps++) {
    seen += readdirSync("/dev/shm").filter((n) => n.startsWith(`aenv-zstd-${ns}-${child.pid}-`)).length;
    await sweepScratch("/dev/shm");
    done = await Promise.race([exited.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 2))]);
  }
  assert.equal(await exited, 0, out);
  assert.match(out, /rounds [1-9]/);
  assert.ok(sweeps > 100 && seen > 0, `${sweeps} sweeps saw ${seen} of its folders`);
});

test("a batch still round-trips with the named scratch folders", async () => {
  const data = Buffer.from("aenv ".repeat(1000));
  assert.deepEqual(await decompress(await compress(data)), data);
});
