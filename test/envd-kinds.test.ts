// Both envd kinds (runtime.envd): the native (Go) one every other test file runs, and the Node
// one. The same SDK calls through a real server and real runsc sandboxes: commands, files, a
// PTY, a process kept across pause/resume, fork, and what the sandbox's runtime holds.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { Sandbox } from "e2b";
import { counterLoop, untilTrue } from "./helpers/sandbox.js";
import { cleanupDataDir, ROOT, startServer, type TestServer, useE2b } from "./helpers/server.js";

const built = existsSync(join(ROOT, "packages/envd/dist/envd-native"));

for (const kind of ["native", "node"] as const) {
  describe(`runtime.envd = ${kind}`, {
    skip: kind === "native" && !built && "the native envd is not built (no Go)",
  }, () => {
    let server: TestServer;
    before(async () => {
      server = await startServer({ env: { AENV_ENVD: kind, AENV_WARM_POOL_MAX: "0" } });
      useE2b(server);
    });
    after(async () => {
      await server?.stop();
      if (server) cleanupDataDir(server);
    });

    it("runs the SDK's commands and files", async () => {
      const s = await Sandbox.create({ timeoutMs: 120_000, envs: { GREETING: "hi" } });
      try {
        const bin = await s.commands.run("ls /.aenv/bin");
        // the native runtime has no node at all
        assert.match(bin.stdout, kind === "native" ? /^envd$/m : /^node$/m);
        assert.doesNotMatch(bin.stdout, kind === "native" ? /^node$/m : /^envd$/m);
        const r = await s.commands.run('echo "$GREETING $(whoami) $PWD"; echo err >&2; exit 3').catch((e) => e);
        assert.equal(r.exitCode, 3);
        assert.equal(r.stdout, "hi user /home/user\n");
        assert.equal(r.stderr, "err\n");
        assert.equal((await s.commands.run("id -u", { user: "root" })).stdout.trim(), "0");
        // The Node envd starts commands through init's vfork + exec service (a fork of node
        // costs twice that in gVisor); the native one starts them itself.
        const parent = (await s.commands.run("echo $PPID; cat /proc/$PPID/cmdline | tr '\\0' ' '")).stdout;
        if (kind === "node") {
          assert.match(parent, /^1\n.*aenv-init/);
          // The service's socket is root's alone: the default user cannot reach it.
          const ls = await s.commands.run("ls /dev/shm/.aenv-spawn-* 2>&1 || true");
          assert.match(ls.stdout, /Permission denied/);
        } else assert.match(parent, /^\d+\n\/\.aenv\/bin\/envd /);
        await s.files.write("notes/a.txt", "native é");
        assert.equal(await s.files.read("/home/user/notes/a.txt"), "native é");
        const list = await s.files.list("/home/user/notes");
        assert.deepEqual(
          list.map((e) => [e.name, e.type]),
          [["a.txt", "file"]],
        );
        assert.equal((await s.commands.run("stat -c %U /home/user/notes/a.txt")).stdout.trim(), "user");
        // a PTY, as the CLI's shell uses it
        let out = "";
        const pty = await s.pty.create({
          cols: 80,
          rows: 24,
          onData: (d) => {
            out += Buffer.from(d).toString();
          },
        });
        await s.pty.sendInput(pty.pid, Buffer.from("tty; exit\n"));
        await pty.wait().catch(() => undefined);
        assert.match(out, /\/dev\/pts\/\d+/);
      } finally {
        await s.kill();
      }
    });

    it("keeps a running process across pause and resume, and forks it", async () => {
      const s = await Sandbox.create({ timeoutMs: 120_000 });
      const kids: Sandbox[] = [];
      try {
        await s.commands.run(counterLoop("/tmp/n"), { background: true });
        await untilTrue(s, "test -s /tmp/n");
        const before = Number((await s.files.read("/tmp/n")).trim());
        await s.pause();
        await Sandbox.connect(s.sandboxId);
        await untilTrue(s, `test "$(cat /tmp/n)" -gt ${before + 2}`);
        const forked = (await s.fork({ count: 2 } as never)) as unknown as Array<Sandbox | Error>;
        for (const f of forked) {
          assert.ok(!(f instanceof Error), String(f));
          kids.push(f as Sandbox);
        }
        for (const k of kids) {
          const n = Number((await k.files.read("/tmp/n")).trim());
          assert.ok(n > before, `the child's counter (${n}) goes on from the parent's`);
          await untilTrue(k, `test "$(cat /tmp/n)" -gt ${n}`);
        }
        const procs = await kids[0]!.commands.list();
        assert.ok(procs.some((p) => /python3/.test(`${p.cmd} ${p.args.join(" ")}`)));
      } finally {
        await Promise.all([s, ...kids].map((x) => x.kill().catch(() => false)));
      }
    });
  });
}
