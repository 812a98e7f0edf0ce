// Pause, resume, TTL auto-pause, autoResume, snapshots and fork, with real runsc checkpoints
// driven by the e2b SDK.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { describe, test } from "node:test";
import { Sandbox } from "e2b";
import { counterLoop, untilListening, untilTrue } from "./helpers/sandbox.js";
import { getViaHost, serverForFile, untilLogLine, waitFor } from "./helpers/server.js";

// The dead-sandbox check runs often here so that it overlaps pause/resume cycles: a check
// racing a cycle once killed a healthy sandbox.
const srv = serverForFile({ env: { AENV_DEAD_CHECK_INTERVAL: "0.3" } });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A pause image after 24 MiB went through envd's file API (and was deleted): 34-45 MiB when
 * envd kept the buffers, ~16 MiB once it gives them back, as for an idle sandbox.
 */
const PAUSE_AFTER_UPLOADS_MAX_MIB = 24;

/** The counter's value; it is written to a temp file and renamed, so a read never sees it half-written. */
async function counter(s: Sandbox): Promise<number> {
  return Number((await s.commands.run("cat /tmp/count")).stdout.trim());
}

describe("pause and resume", () => {
  test("a paused sandbox resumes with its memory, processes, files and listening server", async () => {
    const s = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      // A counter that lives only in a process's memory, written out on each tick.
      await s.commands.run(counterLoop("/tmp/count"), {
        background: true,
        timeoutMs: 0,
      });
      await s.files.write("/home/user/keep.txt", "kept across pause");
      // Serves a folder of its own: /tmp/count is rewritten 5 times a second, and a file
      // truncated while python sends it is a response cut short, whatever the proxy does.
      await s.files.write("/tmp/www/page.txt", "served across pause");
      await s.commands.run("cd /tmp/www && python3 -m http.server 8000", { background: true, timeoutMs: 0 });
      await untilListening(s, 8000);
      await untilTrue(s, "test -s /tmp/count");
      const tBefore = Date.now();
      const before_ = await counter(s);
      assert.ok(before_ > 0);
      assert.equal(await s.pause(), true);
      const tPaused = Date.now();
      assert.equal(await s.pause(), false, "second pause says already paused");
      const info = await Sandbox.getInfo(s.sandboxId);
      assert.equal(info.state, "paused");
      const listed = await Sandbox.list({ query: { state: ["paused"] } }).nextItems();
      assert.ok(listed.some((x) => x.sandboxId === s.sandboxId));
      await sleep(2000);
      const tResume = Date.now();
      const r = await Sandbox.connect(s.sandboxId);
      const after_ = await counter(r);
      // It continues from where it was, not from zero, and did not run while paused: at most
      // one tick per 200 ms it could have run (however slow pause and resume were), while the
      // ≥ 2 s paused would have added ten more.
      const ranMs = tPaused - tBefore + (Date.now() - tResume);
      const most = before_ + Math.ceil(ranMs / 200) + 2;
      assert.ok(after_ >= before_ && after_ <= most, `before ${before_} after ${after_} (at most ${most})`);
      // It keeps counting: the next tick lands (a 200 ms tick; the wait only bounds a stall).
      await untilTrue(r, `test "$(cat /tmp/count)" -gt ${after_}`, 10);
      assert.equal(await r.files.read("/home/user/keep.txt"), "kept across pause");
      const web = await getViaHost(srv(), `8000-${s.sandboxId}.${srv().domain}`, "/page.txt");
      assert.equal(web.status, 200);
      assert.equal(web.body, "served across pause");
      const procs = await r.commands.list();
      assert.ok(
        procs.some((p) => p.args.join(" ").includes("http.server")),
        "process list survives",
      );
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "running");
    } finally {
      await s.kill();
    }
  });

  test("a pause answers with the sandbox stopped in place; a resume before its image is written goes on in memory, a later one restores the image", async () => {
    const s = await Sandbox.create({ timeoutMs: 120_000 });
    const id = s.sandboxId;
    const lines = (text: string) =>
      srv()
        .logs()
        .split("\n")
        .filter((l) => l.includes(id) && l.includes(text));
    const runtimes = () =>
      execFileSync("runsc", [`--root=${srv().dataDir}/runsc`, "list", "-quiet"], { encoding: "utf8" })
        .split("\n")
        .filter((r) => r.startsWith(id));
    try {
      await s.commands.run(counterLoop("/tmp/count"), { background: true, timeoutMs: 0 });
      await untilTrue(s, "test -s /tmp/count");
      // Right after the answer: paused to every caller, its runtime still there (in memory).
      const before = await counter(s);
      await s.pause();
      assert.equal((await Sandbox.getInfo(id)).state, "paused");
      assert.equal(runtimes().length, 1, "the runtime holds it until its image is written");
      await s.connect();
      await untilLogLine(srv(), [id, '"sandbox resumed"', '"inPlace":true']);
      const after = await counter(s);
      assert.ok(after >= before && after <= before + 10, `counter ${before} → ${after}`);
      // Left paused: the image is written, then the runtime goes; the next resume restores it.
      const written = lines("sandbox paused (image written)").length;
      await s.pause();
      await waitFor("image written", () => lines("sandbox paused (image written)").length > written, 30_000);
      await waitFor("runtime removed", () => runtimes().length === 0, 15_000);
      const resumed = lines('"inPlace":false').length;
      await s.connect();
      await waitFor("restored from its image", () => lines('"inPlace":false').length === resumed + 1, 5000);
      const again = await counter(s);
      assert.ok(again >= after, `counter ${after} → ${again}`);
      await untilTrue(s, `test "$(cat /tmp/count)" -gt ${again}`, 10);
    } finally {
      await s.kill();
    }
  });

  test("a resume or a kill soon after a pause needs no image, and none is written", async () => {
    // sandbox.pause_image_delay_ms (500 ms by default): the image of a pause answered early is
    // written that long after the answer, so an agent's quick next turn finds it in memory.
    const s = await Sandbox.create({ timeoutMs: 120_000 });
    const id = s.sandboxId;
    const written = () =>
      srv()
        .logs()
        .split("\n")
        .filter((l) => l.includes(id) && l.includes('"sandbox paused (image written)"')).length;
    try {
      await s.pause();
      await s.connect();
      await untilLogLine(srv(), [id, '"sandbox resumed"', '"inPlace":true']);
      assert.equal((await s.commands.run("echo back")).stdout, "back\n");
      await s.pause();
      await Sandbox.kill(id);
      // Proof that the delayed write had its chance: a sandbox paused after the kill has its
      // image written, and delayed writes of one delay run in the order their pauses came.
      const later = await Sandbox.create({ timeoutMs: 60_000 });
      try {
        await later.pause();
        await untilLogLine(srv(), [later.sandboxId, '"sandbox paused (image written)"'], 30_000);
      } finally {
        await Sandbox.kill(later.sandboxId).catch(() => {});
      }
      assert.equal(written(), 0, "an image was written for a pause that a resume or kill followed at once");
    } finally {
      await Sandbox.kill(id).catch(() => {});
    }
  });

  test("20 pause/resume cycles lose nothing", async () => {
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    try {
      let expected = "";
      for (let i = 0; i < 20; i++) {
        await s.commands.run(
          `head -c 4096 /dev/urandom > /home/user/f${i}.bin && cat /home/user/f*.bin | sha256sum > /home/user/sum`,
        );
        expected = (await s.commands.run("cat /home/user/sum")).stdout;
        await s.pause();
        await s.connect();
        const got = (await s.commands.run("cat /home/user/f*.bin | sha256sum")).stdout;
        assert.equal(got, expected, `cycle ${i}`);
      }
      assert.equal((await s.commands.run("ls /home/user/*.bin | wc -l")).stdout.trim(), "20");
    } finally {
      await s.kill();
    }
  });

  test("pauses with the server's own envd calls in flight resume to an envd that answers", async () => {
    // The metrics API calls envd from the server, beside the proxy. runsc 20240729 breaks an
    // image whose envd holds a TCP connection when the checkpoint starts (see holdEnvd): the
    // resume then waited 60 s for envd and failed. Metrics asked in the last milliseconds
    // before each pause put such calls in flight.
    const s = await Sandbox.create({ timeoutMs: 300_000 });
    try {
      for (let i = 0; i < 8; i++) {
        const metrics = Array.from({ length: 4 }, () => s.getMetrics().catch(() => []));
        await sleep((i % 4) * 10);
        await s.pause();
        await Promise.all(metrics);
        await s.connect();
        const out = await s.commands.run(`echo cycle ${i}`, { requestTimeoutMs: 20_000 } as never);
        assert.equal(out.stdout, `cycle ${i}\n`);
      }
    } finally {
      await s.kill();
    }
  });

  test("a pause after file transfers does not carry envd's freed buffers", async () => {
    // Uploads leave buffers behind in envd (V8 garbage, freed glibc heap); envd gives them back
    // once transfers stop, or every later pause image, snapshot and fork child carries them.
    const s = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      const data = new Uint8Array(8 << 20).fill(7).buffer;
      for (let i = 0; i < 3; i++) await s.files.write(`/tmp/big${i}`, data);
      await s.commands.run("rm -f /tmp/big*");
      await sleep(1000);
      await s.pause();
      const line = await untilLogLine(srv(), [s.sandboxId, '"sandbox paused (image written)"']);
      const mib = Number(/"bytes":(\d+)/.exec(line)?.[1]) / 2 ** 20;
      assert.ok(mib > 0, `no pause size in the log: ${line}`);
      assert.ok(mib < PAUSE_AFTER_UPLOADS_MAX_MIB, `pause image ${mib.toFixed(1)} MiB after the uploads`);
      await s.connect();
      assert.equal((await s.commands.run("echo back")).stdout, "back\n");
    } finally {
      await s.kill();
    }
  });

  test("a sandbox that dies on its own is noticed and removed; healthy ones are left alone", async () => {
    const doomed = await Sandbox.create();
    const healthy = await Sandbox.create();
    try {
      const root = `${srv().dataDir}/runsc`;
      // -quiet: the JSON form asks each sandbox, and pooled ones are frozen.
      const ids = execFileSync("runsc", [`--root=${root}`, "list", "-quiet"])
        .toString()
        .split("\n");
      const runtime = ids.map((id) => ({ id })).find((c) => c.id.startsWith(`${doomed.sandboxId}-`));
      assert.ok(runtime, "runsc knows the sandbox");
      // As an OOM kill would: the sandbox's processes are gone, the server was not asked.
      execFileSync("runsc", [`--root=${root}`, "kill", runtime.id, "KILL"]);
      const deadline = Date.now() + 15_000;
      while (Date.now() < deadline && (await Sandbox.list().nextItems()).some((x) => x.sandboxId === doomed.sandboxId))
        await sleep(200);
      await assert.rejects(Sandbox.getInfo(doomed.sandboxId), "the dead sandbox is gone from the API");
      // Meanwhile the other one kept running through many checks, pauses and resumes included.
      for (let i = 0; i < 3; i++) {
        await healthy.pause();
        await healthy.connect();
      }
      assert.equal((await healthy.commands.run("echo alive")).stdout, "alive\n");
    } finally {
      await doomed.kill().catch(() => false);
      await healthy.kill();
    }
  });

  test("concurrent pauses join one operation; kill waits for it", async () => {
    const s = await Sandbox.create();
    const [a, b] = await Promise.all([s.pause(), s.pause()]);
    assert.ok(a === true && b === true, `${a} ${b}`);
    assert.equal(await s.kill(), true);
    assert.equal(await Sandbox.kill(s.sandboxId), false);
  });
});

describe("TTL", () => {
  test("expiry pauses by default, and paused time does not count", async () => {
    const s = await Sandbox.create({ timeoutMs: 3_000 });
    assert.equal((await s.getInfo()).lifecycle?.onTimeout ?? "pause", "pause");
    const deadline = Date.now() + 20_000;
    while ((await Sandbox.getInfo(s.sandboxId)).state !== "paused" && Date.now() < deadline) await sleep(250);
    assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused");
    const r = await Sandbox.connect(s.sandboxId, { timeoutMs: 60_000 });
    assert.equal((await r.commands.run("echo back")).stdout, "back\n");
    await r.kill();
  });

  test("onTimeout kill kills", async () => {
    const s = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: "kill" } } as never);
    // Expiry is checked every second; removal follows.
    const gone = () =>
      Sandbox.getInfo(s.sandboxId).then(
        () => false,
        () => true,
      );
    const deadline = Date.now() + 20_000;
    while (!(await gone()) && Date.now() < deadline) await sleep(250);
    await assert.rejects(Sandbox.getInfo(s.sandboxId));
    assert.ok(!(await Sandbox.list().nextItems()).some((x) => x.sandboxId === s.sandboxId));
  });

  test("autoResume: proxy traffic resumes a paused sandbox; without it, a clear error", async () => {
    const on = await Sandbox.create({ lifecycle: { onTimeout: "pause", autoResume: true } } as never);
    const off = await Sandbox.create();
    try {
      for (const s of [on, off]) {
        await s.commands.run("mkdir -p /tmp/w && echo served > /tmp/w/i && cd /tmp/w && python3 -m http.server 8001", {
          background: true,
          timeoutMs: 0,
        });
        await untilListening(s, 8001);
      }
      await on.pause();
      await off.pause();
      const r = await getViaHost(srv(), `8001-${on.sandboxId}.${srv().domain}`, "/i");
      assert.equal(r.status, 200);
      assert.equal(r.body, "served\n");
      assert.equal((await Sandbox.getInfo(on.sandboxId)).state, "running");
      const r2 = await getViaHost(srv(), `8001-${off.sandboxId}.${srv().domain}`, "/i");
      assert.equal(r2.status, 410);
      assert.match(r2.body, /paused/);
    } finally {
      await on.kill();
      await off.kill();
    }
  });
});

describe("snapshots", () => {
  test("snapshot → create from it → list → delete; a name taken again is a new build", async () => {
    const s = await Sandbox.create();
    try {
      await s.files.write("/home/user/snap.txt", "in the snapshot");
      await s.commands.run("bash -c 'echo $$ > /tmp/pid; sleep 1000'", { background: true, timeoutMs: 0 });
      const snap = await s.createSnapshot({ name: "my-snap" } as never);
      assert.ok(snap.snapshotId);
      // The source keeps running and can diverge.
      await s.files.write("/home/user/snap.txt", "changed after");
      const c = await Sandbox.create(snap.snapshotId);
      try {
        assert.equal(await c.files.read("/home/user/snap.txt"), "in the snapshot");
        const pid = (await c.commands.run("cat /tmp/pid")).stdout.trim();
        assert.equal((await c.commands.run(`kill -0 ${pid} && echo alive`)).stdout, "alive\n");
      } finally {
        await c.kill();
      }
      const byName = await Sandbox.create("my-snap");
      await byName.kill();
      // The name taken again is a new build under it: the name starts the newest, the first
      // build still starts by its ID.
      const again = await s.createSnapshot({ name: "my-snap" } as never);
      assert.notEqual(again.snapshotId, snap.snapshotId);
      const newer = await Sandbox.create("my-snap");
      try {
        assert.equal(await newer.files.read("/home/user/snap.txt"), "changed after");
      } finally {
        await newer.kill();
      }
      const listed = await Sandbox.listSnapshots({ sandboxId: s.sandboxId } as never).nextItems();
      assert.deepEqual(
        listed.map((x) => x.snapshotId),
        [snap.snapshotId, again.snapshotId],
      );
      assert.equal(await Sandbox.deleteSnapshot(again.snapshotId), true);
      const first = await Sandbox.create("my-snap");
      try {
        assert.equal(
          await first.files.read("/home/user/snap.txt"),
          "in the snapshot",
          "the name falls back to the build left",
        );
      } finally {
        await first.kill();
      }
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
      assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
      await assert.rejects(Sandbox.create(snap.snapshotId));
    } finally {
      await s.kill();
    }
  });
});

describe("fork", () => {
  for (const n of [1, 4]) {
    test(`fork ×${n}: children inherit files and memory, then diverge with fresh randomness`, async () => {
      const p = await Sandbox.create({ timeoutMs: 120_000 });
      const kids: Sandbox[] = [];
      try {
        await p.files.write("/home/user/inherited.txt", "from parent");
        await p.commands.run(counterLoop("/tmp/count", 100), {
          background: true,
          timeoutMs: 0,
        });
        await untilTrue(p, "test -s /tmp/count");
        const forked = await p.fork({ count: n } as never);
        for (const f of forked as unknown as Array<Sandbox | Error>) {
          assert.ok(!(f instanceof Error), `fork child failed: ${(f as Error).message}`);
          kids.push(f as Sandbox);
        }
        assert.equal(kids.length, n);
        const ids = new Set([p.sandboxId, ...kids.map((k) => k.sandboxId)]);
        assert.equal(ids.size, n + 1);
        const rand = new Set<string>();
        rand.add((await p.commands.run("head -c 16 /dev/urandom | od -An -tx1")).stdout);
        for (const [i, k] of kids.entries()) {
          assert.equal(await k.files.read("/home/user/inherited.txt"), "from parent");
          assert.ok((await counter(k)) > 100, "in-memory counter inherited");
          await k.files.write("/home/user/mine.txt", `child ${i}`);
          rand.add((await k.commands.run("head -c 16 /dev/urandom | od -An -tx1")).stdout);
          rand.add((await k.commands.run("python3 -c 'import os; print(os.urandom(16).hex())'")).stdout);
        }
        assert.equal(rand.size, 1 + 2 * n, "no two sandboxes share randomness");
        for (const [i, k] of kids.entries()) assert.equal(await k.files.read("/home/user/mine.txt"), `child ${i}`);
        assert.equal(await p.files.exists("/home/user/mine.txt"), false, "parent unaffected");
        assert.equal((await p.commands.run("echo parent-ok")).stdout, "parent-ok\n");
      } finally {
        await Promise.all([p, ...kids].map((s) => s.kill().catch(() => false)));
      }
    });
  }

  test("fork of an unknown sandbox is a not-found error", async () => {
    await assert.rejects(Sandbox.fork("i00000000000000000000", { count: 2 } as never), /not found/i);
  });

  test("bad fork counts are rejected", async () => {
    const r = await srv().api("POST", "/sandboxes/i00000000000000000000/fork", { count: 101 });
    assert.equal(r.status, 400);
  });
});
