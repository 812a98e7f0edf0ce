// Filesystem-only pause (`pause({ keepMemory: false })`, `autoPauseMemory: false`): the
// sandbox keeps its writable filesystem only, and a resume boots it afresh from its template
// plus that layer — driven by the unmodified e2b SDK against real runsc sandboxes.
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox } from "e2b";
import { cliRunner } from "./helpers/cli.js";
import { untilTrue } from "./helpers/sandbox.js";
import { getViaHost, startServer, TEMPLATES_DIR, type TestServer, useE2b, waitFor } from "./helpers/server.js";

/** The `base` template's tree (its record names the folder). */
function baseRootfs(): string {
  const rec = JSON.parse(readFileSync(join(TEMPLATES_DIR, "base", "template.json"), "utf8")) as { rootfsDir: string };
  return join(TEMPLATES_DIR, "base", rec.rootfsDir);
}

/**
 * A templates folder of our own: `base`, and `fsstart`, the same tree with a start command
 * that appends a line to a file each time it runs (so a resume can tell it ran again, after
 * the layer was back). Neither is warm: nothing is captured at server start.
 */
function templatesDir(): string {
  const dir = mkdtempSync("/var/tmp/aenv-fsp-tpl-");
  const base = JSON.parse(readFileSync(join(TEMPLATES_DIR, "base", "template.json"), "utf8")) as Record<
    string,
    unknown
  >;
  const add = (id: string, extra: Record<string, unknown>) => {
    mkdirSync(join(dir, id));
    symlinkSync(join(TEMPLATES_DIR, "base", String(base.rootfsDir)), join(dir, id, String(base.rootfsDir)));
    writeFileSync(join(dir, id, "template.json"), JSON.stringify({ ...base, id, name: id, warm: false, ...extra }));
  };
  add("base", {});
  // /dev/shm is new at every boot and never part of a layer: the ready check sees this boot.
  add("fsstart", {
    startCmd: "echo boot >> /home/user/boots.log && touch /dev/shm/started && sleep infinity",
    readyCmd: "test -e /dev/shm/started",
  });
  return dir;
}

const tplDir = templatesDir();
let server: TestServer;
const env = {
  AENV_NET_PREFIX: process.env.AENV_TEST_NET_PREFIX ?? "aef",
  AENV_SLOT_CIDR: process.env.AENV_TEST_SLOT_CIDR ?? "10.241.0.0/16",
  AENV_PAUSE_COMMIT_DELAY: "3600",
};

before(async () => {
  server = await startServer({ templatesDir: tplDir, env });
  useE2b(server);
});
after(async () => {
  await server?.stop();
  if (server) rmSync(server.dataDir, { recursive: true, force: true });
  rmSync(tplDir, { recursive: true, force: true });
});

const sandboxDir = (id: string) => join(server.dataDir, "sandboxes", id);

/** Files the tests change, as `stat` and a checksum describe them (type, mode, owner, size, mtime, target). */
const PATHS = [
  "/home/user/new.txt",
  "/home/user/link",
  "/home/user/hard",
  "/home/user/big.bin",
  "/home/user/setuid",
  "/etc/hostname",
  "/etc/issue",
  "/opt/owned",
  "/opt/owned/deep",
  "/tmp/in-tmp.txt",
  "/usr/share/doc",
  "/etc/os-release",
  `/home/user/${"long-name-".repeat(12)}ü ñ.txt`,
];

async function describeFiles(s: Sandbox): Promise<string> {
  const quoted = PATHS.map((p) => `'${p}'`).join(" ");
  const r = await s.commands.run(
    `for p in ${quoted}; do if [ -e "$p" ] || [ -L "$p" ]; then stat -c '%n|%F|%a|%u|%g|%s|%Y|%N|%h' "$p"; ` +
      `[ -f "$p" ] && sha256sum < "$p"; else echo "$p|absent"; fi; done`,
    { user: "root" },
  );
  return r.stdout;
}

async function changeFiles(s: Sandbox): Promise<void> {
  await s.files.write("/home/user/new.txt", "hello from before the pause\n");
  await s.commands.run(
    [
      "set -e",
      "cd /home/user",
      "ln -s /home/user/new.txt link",
      "ln new.txt hard",
      "head -c 3000000 /dev/urandom > big.bin",
      "cp /bin/true setuid && chmod 4755 setuid",
      "chmod 600 /etc/hostname",
      "rm /etc/issue",
      "rm -rf /usr/share/doc",
      "mkdir -p /opt/owned/deep && chown -R 1000:1000 /opt/owned && chmod 750 /opt/owned",
      "echo tmp > /tmp/in-tmp.txt",
      `echo long > '/home/user/${"long-name-".repeat(12)}ü ñ.txt'`,
      // Kept to the second: a tar header holds whole seconds.
      "touch -d '2001-02-03 04:05:06' /home/user/new.txt",
    ].join("\n"),
    { user: "root" },
  );
}

describe("filesystem-only pause", () => {
  test("keeps files (changes, deletions, modes, owners, links), drops processes, boots afresh; twice", async () => {
    const s = await Sandbox.create("fsstart", { timeoutMs: 300_000 });
    try {
      await untilTrue(s, "test -s /home/user/boots.log");
      // The template tree every sandbox sees for its layer is read-only, even to root.
      const w = await s.commands.run("touch /.aenv/lower/x 2>&1 || echo refused", { user: "root" });
      assert.match(w.stdout, /refused/);
      assert.ok(!existsSync(join(baseRootfs(), "x")), "template tree untouched");
      await changeFiles(s);
      await s.commands.run("sleep 4242", { background: true, timeoutMs: 0 });
      await untilTrue(s, "pgrep -f 'sleep 424[2]' >/dev/null");
      const before_ = await describeFiles(s);
      assert.match(before_, /\/etc\/issue\|absent/);
      assert.match(before_, /\/home\/user\/setuid\|regular file\|4755\|0\|0/);

      assert.equal(await s.pause({ keepMemory: false } as never), true);
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused");
      const listed = await Sandbox.list({ query: { state: ["paused"] } }).nextItems();
      assert.ok(
        listed.some((x) => x.sandboxId === s.sandboxId),
        "listed as paused",
      );
      // Only the layer is kept: no checkpoint image, and a layer far smaller than memory.
      assert.ok(existsSync(join(sandboxDir(s.sandboxId), "fs-layer", "layer.tar")), "layer kept");
      assert.ok(!existsSync(join(sandboxDir(s.sandboxId), "image")), "no memory image");
      const layerBytes = statSync(join(sandboxDir(s.sandboxId), "fs-layer", "layer.tar")).size;
      assert.ok(layerBytes > 3_000_000 && layerBytes < 20_000_000, `layer is ${layerBytes} bytes`);

      const r = await Sandbox.connect(s.sandboxId);
      assert.equal(await describeFiles(r), before_, "files as they were");
      assert.equal((await r.commands.run("cat /home/user/new.txt")).stdout, "hello from before the pause\n");
      const ps = await r.commands.run("pgrep -f 'sleep 424[2]' || echo none");
      assert.equal(ps.stdout.trim(), "none", "processes did not survive");
      await untilTrue(r, "test -e /dev/shm/started");
      assert.equal(
        (await r.commands.run("cat /home/user/boots.log")).stdout,
        "boot\nboot\n",
        "start command ran again",
      );
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "running");

      // A second cycle: the new layer holds everything since the template, not just the delta.
      await r.commands.run("rm /home/user/new.txt && echo second > /home/user/second.txt", { user: "root" });
      assert.equal(await r.pause({ keepMemory: false } as never), true);
      const r2 = await Sandbox.connect(s.sandboxId);
      const out = await r2.commands.run(
        "cat /home/user/second.txt; test -e /home/user/new.txt || echo new-gone; cat /home/user/hard; test -e /etc/issue || echo issue-gone; wc -c < /home/user/big.bin",
      );
      assert.equal(out.stdout, "second\nnew-gone\nhello from before the pause\nissue-gone\n3000000\n");
      await untilTrue(r2, "test -e /dev/shm/started");
      assert.equal((await r2.commands.run("cat /home/user/boots.log")).stdout, "boot\nboot\nboot\n");
      // A memory pause of the same sandbox still works, and keeps its processes.
      await r2.commands.run("sleep 4343", { background: true, timeoutMs: 0 });
      await r2.pause();
      // Written right behind the pause's answer.
      await waitFor("memory image kept", () => existsSync(join(sandboxDir(s.sandboxId), "image")));
      const r3 = await Sandbox.connect(s.sandboxId);
      assert.notEqual((await r3.commands.run("pgrep -f 'sleep 434[3]' || echo none")).stdout.trim(), "none");
      assert.equal((await r3.commands.run("cat /home/user/second.txt")).stdout, "second\n");
    } finally {
      await Sandbox.kill(s.sandboxId).catch(() => {});
    }
  });

  test("a TTL expiry with autoPauseMemory: false pauses filesystem-only", async () => {
    const s = await Sandbox.create("base", {
      timeoutMs: 4_000,
      lifecycle: { onTimeout: { action: "pause", keepMemory: false } },
    } as never);
    try {
      await s.files.write("/home/user/kept.txt", "expired but kept");
      await s.commands.run("sleep 4444", { background: true, timeoutMs: 0 });
      const deadline = Date.now() + 60_000;
      while ((await Sandbox.getInfo(s.sandboxId)).state !== "paused") {
        assert.ok(Date.now() < deadline, "not paused at its TTL");
        await new Promise((res) => setTimeout(res, 250));
      }
      assert.ok(existsSync(join(sandboxDir(s.sandboxId), "fs-layer", "layer.tar")), "layer kept");
      assert.ok(!existsSync(join(sandboxDir(s.sandboxId), "image")), "no memory image");
      const r = await Sandbox.connect(s.sandboxId, { timeoutMs: 120_000 });
      assert.equal((await r.commands.run("cat /home/user/kept.txt")).stdout, "expired but kept");
      assert.equal((await r.commands.run("pgrep -f 'sleep 444[4]' || echo none")).stdout.trim(), "none");
    } finally {
      await Sandbox.kill(s.sandboxId).catch(() => {});
    }
  });

  test("autoResume with a filesystem-only auto-pause is refused (400)", async () => {
    const r = await server.api("POST", "/v2/sandboxes", {
      templateID: "base",
      autoPauseMemory: false,
      autoResume: { enabled: true },
    });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.match(JSON.stringify(r.body), /autoResume/);
    // Each alone is fine.
    const ok = await server.api("POST", "/v2/sandboxes", { templateID: "base", autoPauseMemory: false });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    await server.api("DELETE", `/sandboxes/${(ok.body as { sandboxID: string }).sandboxID}`);
  });

  test("traffic never resumes a filesystem-only pause; connect without memory boots it", async () => {
    const s = await Sandbox.create("base", {
      timeoutMs: 120_000,
      lifecycle: { onTimeout: "pause", autoResume: true },
    } as never);
    try {
      await s.pause({ keepMemory: false } as never);
      // Through the proxy, as traffic would come: not resumed.
      const r = await getViaHost(server, `49983-${s.sandboxId}.${server.domain}`, "/health");
      // envd's port answers 502 for a paused sandbox (what the SDK expects), others 410.
      assert.equal(r.status, 502, r.body);
      assert.match(r.body, /filesystem only/);
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused");
      // connect with memory: false (the newer SDKs' cold boot) boots a filesystem pause afresh
      const cold = await server.api("POST", `/v2/sandboxes/${s.sandboxId}/connect`, { memory: false, timeout: 60 });
      assert.equal(cold.status, 201, JSON.stringify(cold.body));
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "running");
    } finally {
      await Sandbox.kill(s.sandboxId).catch(() => {});
    }
  });

  // E2B's connect/resume with memory: false (the SDKs' onResume: 'reboot'): a pause that kept
  // memory boots from its disk state instead; a no-op for a running sandbox.
  test("connect with memory: false boots a memory pause from its filesystem, in place or from its image", async () => {
    const s = await Sandbox.create("fsstart", { timeoutMs: 300_000 });
    try {
      await untilTrue(s, "test -s /home/user/boots.log");
      await s.files.write("/home/user/kept.txt", "kept\n");
      for (const [round, waitMs] of [
        [2, 0],
        [3, 2000],
      ] as const) {
        await s.commands.run("sleep 4343", { background: true, timeoutMs: 0 });
        await untilTrue(s, "pgrep -f 'sleep 434[3]' >/dev/null");
        await s.pause();
        // At once: still stopped in place (no image yet); later: from the written image.
        await new Promise((r) => setTimeout(r, waitMs));
        const r = await server.api("POST", `/v2/sandboxes/${s.sandboxId}/connect`, { memory: false, timeout: 120 });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        assert.equal(await s.files.read("/home/user/kept.txt"), "kept\n");
        assert.equal((await s.commands.run("cat /home/user/boots.log")).stdout, "boot\n".repeat(round), "booted again");
        const gone = await s.commands.run("pgrep -f 'sleep 434[3]' || echo none");
        assert.equal(gone.stdout.trim(), "none", "its processes did not survive");
      }
      const running = await server.api("POST", `/v2/sandboxes/${s.sandboxId}/connect`, { memory: false, timeout: 120 });
      assert.equal(running.status, 200, JSON.stringify(running.body));
      assert.equal((await s.commands.run("cat /home/user/boots.log")).stdout, "boot\n".repeat(3));
    } finally {
      await Sandbox.kill(s.sandboxId).catch(() => {});
    }
  });

  // POST /v2/sandboxes/{id}/fork (E2B's SDKs after 2.51): the default timeout when none is
  // given, and memory: false for children that cold-boot from the parent's filesystem.
  test("v2 fork: without memory the children boot from the parent's files (running or filesystem-paused)", async () => {
    const s = await Sandbox.create("fsstart", { timeoutMs: 900_000 });
    const kids: string[] = [];
    try {
      await untilTrue(s, "test -s /home/user/boots.log");
      await s.files.write("/home/user/forked.txt", "from the parent\n");
      await s.commands.run("sleep 4444", { background: true, timeoutMs: 0 });
      await untilTrue(s, "pgrep -f 'sleep 444[4]' >/dev/null");
      const r = await server.api("POST", `/v2/sandboxes/${s.sandboxId}/fork`, { count: 2, memory: false });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const cold = r.body as Array<{ sandbox?: { sandboxID: string } }>;
      assert.equal(cold.length, 2);
      for (const k of cold) {
        assert.ok(k.sandbox, JSON.stringify(k));
        kids.push(k.sandbox.sandboxID);
        const c = await Sandbox.connect(k.sandbox.sandboxID);
        assert.equal(await c.files.read("/home/user/forked.txt"), "from the parent\n");
        assert.equal(
          (await c.commands.run("cat /home/user/boots.log")).stdout,
          "boot\nboot\n",
          "its start command ran",
        );
        assert.equal((await c.commands.run("pgrep -f 'sleep 444[4]' || echo none")).stdout.trim(), "none");
        // The server's default timeout (300 s), not the parent's 900 s left.
        const info = await Sandbox.getInfo(c.sandboxId);
        assert.ok(info.endAt.getTime() - Date.now() < 400_000, String(info.endAt));
      }
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "running");
      await untilTrue(s, "pgrep -f 'sleep 444[4]' >/dev/null");
      // With memory (the default): the parent's processes are in the child.
      const warm = await server.api("POST", `/v2/sandboxes/${s.sandboxId}/fork`, {});
      assert.equal(warm.status, 201, JSON.stringify(warm.body));
      const [w] = warm.body as Array<{ sandbox?: { sandboxID: string } }>;
      assert.ok(w?.sandbox, JSON.stringify(warm.body));
      kids.push(w.sandbox.sandboxID);
      const c = await Sandbox.connect(w.sandbox.sandboxID);
      await untilTrue(c, "pgrep -f 'sleep 444[4]' >/dev/null");
      assert.ok((await Sandbox.getInfo(c.sandboxId)).endAt.getTime() - Date.now() < 400_000);
      // Paused with its memory, its filesystem is inside the checkpoint: 409, not a restore.
      await s.pause();
      const refused = await server.api("POST", `/v2/sandboxes/${s.sandboxId}/fork`, { memory: false });
      assert.equal(refused.status, 409, JSON.stringify(refused.body));
      // Paused filesystem-only: its layer is what the children boot with; it stays paused.
      await Sandbox.connect(s.sandboxId);
      await s.pause({ keepMemory: false } as never);
      const fromLayer = await server.api("POST", `/v2/sandboxes/${s.sandboxId}/fork`, { memory: false });
      assert.equal(fromLayer.status, 201, JSON.stringify(fromLayer.body));
      const [f] = fromLayer.body as Array<{ sandbox?: { sandboxID: string } }>;
      assert.ok(f?.sandbox, JSON.stringify(fromLayer.body));
      kids.push(f.sandbox.sandboxID);
      const fc = await Sandbox.connect(f.sandbox.sandboxID);
      assert.equal(await fc.files.read("/home/user/forked.txt"), "from the parent\n");
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused");
    } finally {
      for (const id of [s.sandboxId, ...kids]) await Sandbox.kill(id).catch(() => {});
    }
  });

  test("kill of a filesystem-paused sandbox removes it and its layer (paused by the CLI)", async () => {
    const s = await Sandbox.create("base", { timeoutMs: 120_000 });
    await s.files.write("/home/user/x.txt", "x");
    const config = mkdtempSync("/var/tmp/aenv-fsp-cli-");
    const { ok } = cliRunner(() => ({
      ...process.env,
      AENV_API_URL: server.url,
      AENV_API_KEY: server.apiKey,
      XDG_CONFIG_HOME: config,
    }));
    try {
      assert.match((await ok("pause", "--no-memory", s.sandboxId)).stdout, /paused \(files only\)/);
    } finally {
      rmSync(config, { recursive: true, force: true });
    }
    assert.ok(existsSync(join(sandboxDir(s.sandboxId), "fs-layer")));
    assert.ok(!existsSync(join(sandboxDir(s.sandboxId), "image")));
    assert.equal(await Sandbox.kill(s.sandboxId), true);
    await assert.rejects(Sandbox.getInfo(s.sandboxId), /not found/i);
    // The folder goes with the runtime's removal, in the background.
    const deadline = Date.now() + 30_000;
    while (existsSync(sandboxDir(s.sandboxId)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.ok(!existsSync(sandboxDir(s.sandboxId)), "sandbox folder removed");
  });

  test("a server restart keeps a filesystem-paused sandbox resumable", async () => {
    const s = await Sandbox.create("fsstart", { timeoutMs: 120_000 });
    try {
      await s.files.write("/home/user/across-restart.txt", "still here");
      await s.pause({ keepMemory: false } as never);
      await server.stop();
      server = await server.restart();
      useE2b(server);
      assert.equal((await Sandbox.getInfo(s.sandboxId)).state, "paused");
      const r = await Sandbox.connect(s.sandboxId);
      assert.equal((await r.commands.run("cat /home/user/across-restart.txt")).stdout, "still here");
      await untilTrue(r, "test -e /dev/shm/started");
      assert.equal((await r.commands.run("cat /home/user/boots.log")).stdout, "boot\nboot\n");
    } finally {
      await Sandbox.kill(s.sandboxId).catch(() => {});
    }
  });
});
