// Kill -9 of the server in the middle of a pause and of a fork: after a restart every sandbox
// is in its previous or its new state, and usable.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Sandbox } from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b, waitFor } from "./helpers/server.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function everySandboxUsable(server: TestServer): Promise<string[]> {
  const r = await server.api("GET", "/v2/sandboxes");
  const items = r.body as Array<{ sandboxID: string; state: string }>;
  for (const it of items) {
    const s = await Sandbox.connect(it.sandboxID);
    assert.equal(
      (await s.commands.run("cat /home/user/mark")).stdout,
      "marked\n",
      `sandbox ${it.sandboxID} (${it.state})`,
    );
  }
  return items.map((i) => i.sandboxID);
}

/**
 * `beforeCrash` on a fresh server, then SIGKILL, a restart on the same data and `afterRestart`.
 * Whichever server is up at the end is stopped and its data removed, whatever failed.
 */
async function acrossACrash<T>(
  env: Record<string, string>,
  beforeCrash: (first: TestServer) => Promise<T>,
  afterRestart: (second: TestServer, t: T) => Promise<void>,
): Promise<void> {
  const first = await startServer({ env });
  let second: TestServer | undefined;
  useE2b(first);
  try {
    const t = await beforeCrash(first);
    await first.crash();
    second = await first.restart();
    await afterRestart(second, t);
  } finally {
    await (second ?? first).stop();
    cleanupDataDir(second ?? first);
  }
}

for (const delayMs of [100, 400]) {
  test(`SIGKILL ${delayMs} ms into a pause leaves the sandbox running or paused, and usable`, () =>
    acrossACrash(
      {},
      async (first) => {
        const s = await Sandbox.create();
        await s.files.write("/home/user/mark", "marked\n");
        void first.api("POST", `/sandboxes/${s.sandboxId}/pause`, {}).catch(() => {});
        await sleep(delayMs);
        return s.sandboxId;
      },
      async (second, id) => {
        assert.deepEqual(await everySandboxUsable(second), [id]);
        await Sandbox.kill(id);
      },
    ));
}

/** A sandbox with a file and a process (`sleep <n>`) only its memory can bring back. */
async function markedSandbox(n: number): Promise<Sandbox> {
  const s = await Sandbox.create();
  await s.files.write("/home/user/mark", "marked\n");
  await s.commands.run(`sleep ${n}`, { background: true, timeoutMs: 0 });
  return s;
}

/** After the restart: paused, and its files and processes are there once it is resumed. */
async function pausedAndWhole(second: TestServer, id: string, n: number): Promise<void> {
  const info = await second.api("GET", `/sandboxes/${id}`);
  assert.equal((info.body as { state: string }).state, "paused");
  const r = await Sandbox.connect(id);
  assert.equal((await r.commands.run("cat /home/user/mark")).stdout, "marked\n");
  const pattern = `sleep ${String(n).slice(0, -1)}[${String(n).slice(-1)}]`;
  assert.notEqual((await r.commands.run(`pgrep -f '${pattern}' || echo none`)).stdout.trim(), "none");
  await r.kill();
}

test("SIGKILL right after a pause's answer: paused after the restart (its image written from the runtime), and usable", () =>
  acrossACrash(
    {},
    async (first) => {
      const s = await markedSandbox(4545);
      // The pause answers once the sandbox is stopped in place; its image is still being written.
      assert.equal((await first.api("POST", `/sandboxes/${s.sandboxId}/pause`, {})).status, 204);
      return s.sandboxId;
    },
    (second, id) => pausedAndWhole(second, id, 4545),
  ));

test("with sandbox.pause_waits_for_image, a pause answers once its image is on disk; SIGKILL then loses nothing", () =>
  acrossACrash(
    { AENV_PAUSE_WAITS_FOR_IMAGE: "1" },
    async (first) => {
      const s = await markedSandbox(4546);
      assert.equal((await first.api("POST", `/sandboxes/${s.sandboxId}/pause`, {})).status, 204);
      // At the answer, before anything else runs: the image is whole (not written behind it).
      const image = join(first.dataDir, "sandboxes", s.sandboxId, "image");
      assert.ok(existsSync(join(image, "checkpoint.img")) && existsSync(join(image, "pages.img")), "image on disk");
      assert.doesNotMatch(first.logs(), /stopped in place/);
      return s.sandboxId;
    },
    async (second, id) => {
      assert.doesNotMatch(second.logs(), /image written after the restart/);
      await pausedAndWhole(second, id, 4546);
    },
  ));

test("SIGKILL in the middle of a fork leaves the parent usable, no half-started children and no capture", () =>
  acrossACrash(
    {},
    async (first) => {
      const p = await Sandbox.create();
      await p.files.write("/home/user/mark", "marked\n");
      let answered = false;
      void first
        .api("POST", `/sandboxes/${p.sandboxId}/fork`, { count: 3 })
        .catch(() => {})
        .finally(() => (answered = true));
      // The crash comes once the fork's capture is on disk (or, should it all be over first,
      // once the fork answered).
      const forks = join(first.dataDir, "forks");
      while (!answered && !(existsSync(forks) && readdirSync(forks).length > 0)) await sleep(10);
      return p.sandboxId;
    },
    async (second, parent) => {
      const ids = await everySandboxUsable(second);
      assert.ok(ids.includes(parent));
      const forks = join(second.dataDir, "forks");
      assert.ok(!existsSync(forks) || readdirSync(forks).length === 0, "fork capture removed");
      for (const id of ids) await Sandbox.kill(id);
    },
  ));

/** The runtime sandboxes a server's runsc state folder holds (another lane's are not its). */
function runtimesOf(server: TestServer): Set<string> {
  const out = execFileSync("runsc", [`--root=${server.dataDir}/runsc`, "list", "-quiet"], { encoding: "utf8" });
  return new Set(out.split("\n").filter(Boolean));
}

/** Runtime sandboxes (by runtime ID) whose cgroup is frozen now: hibernated or pooled ones. */
function frozenRuntimes(server: TestServer): string[] {
  const mine = runtimesOf(server);
  return frozenCgroups().filter((id) => mine.has(id));
}

function frozenCgroups(): string[] {
  const v2 = existsSync("/sys/fs/cgroup/cgroup.controllers");
  const root = v2 ? "/sys/fs/cgroup/aenv" : "/sys/fs/cgroup/freezer/aenv";
  if (!existsSync(root)) return [];
  return readdirSync(root, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name)
    .filter((id) => {
      try {
        return v2
          ? /^frozen 1$/m.test(readFileSync(`${root}/${id}/cgroup.events`, "utf8"))
          : readFileSync(`${root}/${id}/freezer.state`, "utf8").trim() === "FROZEN";
      } catch {
        return false;
      }
    });
}

test("SIGKILL with a hibernated sandbox and a frozen warm pool: the next start thaws and adopts the sandbox, and removes the pool's", () =>
  acrossACrash(
    { AENV_HIBERNATE_AFTER: "2" },
    async (first) => {
      const s = await Sandbox.create();
      await s.files.write("/home/user/mark", "marked\n");
      // Frozen (a SIGKILL cannot end such a process until it is thawed): the sandbox by
      // hibernation, and the pooled sandbox that replaced the one this create took.
      await waitFor("the sandbox and a pooled one frozen", () => {
        const f = frozenRuntimes(first);
        return f.some((r) => r.startsWith(s.sandboxId)) && f.some((r) => !r.startsWith(s.sandboxId));
      });
      return { id: s.sandboxId, pooled: frozenRuntimes(first).filter((r) => !r.startsWith(s.sandboxId)) };
    },
    async (second, before) => {
      const ids = await everySandboxUsable(second);
      assert.deepEqual(ids, [before.id], "the hibernated sandbox adopted, running and whole");
      const left = readdirSync(
        existsSync("/sys/fs/cgroup/cgroup.controllers") ? "/sys/fs/cgroup/aenv" : "/sys/fs/cgroup/freezer/aenv",
      );
      for (const r of before.pooled) assert.ok(!left.includes(r), `the dead server's pooled sandbox ${r} removed`);
      await Sandbox.kill(before.id);
    },
  ));
