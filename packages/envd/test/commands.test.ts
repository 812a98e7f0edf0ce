/** Process service through the real e2b SDK. */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { AuthenticationError, CommandExitError, InvalidArgumentError, type Sandbox, TimeoutError } from "e2b";
import { type Harness, needsRoot, sleep, startHarness, until } from "./helpers.js";

describe("envd process service (e2b SDK)", { skip: needsRoot }, () => {
  let h: Harness;
  let sbx: Sandbox;

  before(async () => {
    h = await startHarness();
    sbx = await h.connect();
  });
  after(async () => {
    await h?.close();
  });

  describe("commands", () => {
    it("runs a foreground command with env, cwd, streaming callbacks", async () => {
      const out: string[] = [];
      const err: string[] = [];
      const r = await sbx.commands.run('echo "$X $SANDBOX_VAR $USER $HOME"; pwd; echo oops >&2', {
        envs: { X: "1" },
        onStdout: (d) => void out.push(d),
        onStderr: (d) => void err.push(d),
      });
      assert.equal(r.exitCode, 0);
      assert.equal(r.stdout, `1 sbx user ${h.home}\n${h.workdir}\n`);
      assert.equal(r.stderr, "oops\n");
      assert.equal(out.join(""), r.stdout);
      assert.equal(err.join(""), "oops\n");

      const r2 = await sbx.commands.run("pwd", { cwd: "/tmp" });
      assert.equal(r2.stdout, "/tmp\n");
    });

    it("runs as the requested user", async () => {
      const asDefault = await sbx.commands.run("id -u; id -g");
      assert.equal(asDefault.stdout, "1000\n1000\n");
      const asRoot = await sbx.commands.run("id -u; echo $HOME; pwd", { user: "root" });
      assert.equal(asRoot.stdout, `0\n${h.rootHome}\n${h.workdir}\n`);
      const asNobody = await sbx.commands.run("id -u; echo $USER", { user: "nobody" as "root" });
      assert.equal(asNobody.stdout, "65534\nnobody\n");
      await assert.rejects(sbx.commands.run("true", { user: "ghost" as "root" }), AuthenticationError);
    });

    it("reports exit codes and bad cwd", async () => {
      await assert.rejects(sbx.commands.run("echo partial; exit 3"), (e: unknown) => {
        assert.ok(e instanceof CommandExitError);
        assert.equal(e.exitCode, 3);
        assert.equal(e.stdout, "partial\n");
        assert.equal(e.error, "exit status 3");
        return true;
      });
      await assert.rejects(sbx.commands.run("true", { cwd: "/definitely/not/here" }), (e: unknown) => {
        assert.ok(e instanceof InvalidArgumentError);
        assert.match(String((e as Error).message), /cwd '\/definitely\/not\/here' does not exist/);
        return true;
      });
    });

    it("streams output as it is produced", async () => {
      const stamps: number[] = [];
      const t0 = Date.now();
      await sbx.commands.run("echo a; sleep 0.4; echo b", { onStdout: () => void stamps.push(Date.now() - t0) });
      assert.equal(stamps.length, 2);
      assert.ok((stamps[1] ?? 0) - (stamps[0] ?? 0) >= 300, `chunks were not streamed: ${stamps}`);
    });

    it("large output arrives complete; a lingering grandchild does not block the result", async () => {
      const big = await sbx.commands.run("head -c 3000000 /dev/zero | base64 -w 0");
      assert.equal(big.stdout.length, 4_000_000);
      const t0 = Date.now();
      const r = await sbx.commands.run("sleep 5 & echo started");
      assert.equal(r.stdout, "started\n");
      assert.ok(Date.now() - t0 < 3000, "did not wait for the grandchild");
    });

    it("background: stdin, closeStdin, list, kill", async () => {
      const cat = await sbx.commands.run("cat", { background: true, stdin: true });
      await sbx.commands.sendStdin(cat.pid, "hello\n");
      await sbx.commands.closeStdin(cat.pid);
      const res = await cat.wait();
      assert.equal(res.stdout, "hello\n");

      const sleeper = await sbx.commands.run("sleep 30", { background: true, envs: { TAGGED: "yes" }, timeoutMs: 0 });
      const list = await sbx.commands.list();
      const mine = list.find((p) => p.pid === sleeper.pid);
      assert.ok(mine, "background process is listed");
      assert.equal(mine.cmd, "/bin/bash");
      assert.deepEqual(mine.args, ["-l", "-c", "sleep 30"]);
      assert.equal(mine.envs.TAGGED, "yes");
      assert.equal(mine.cwd, h.workdir);

      assert.equal(await sbx.commands.kill(sleeper.pid), true);
      await assert.rejects(sleeper.wait(), (e: unknown) => {
        assert.ok(e instanceof CommandExitError);
        assert.equal(e.exitCode, -1);
        assert.equal(e.error, "signal: killed");
        return true;
      });
      assert.equal(await sbx.commands.kill(sleeper.pid), false);
      assert.equal(await sbx.commands.kill(999_999), false);
      const after = await sbx.commands.list();
      assert.ok(!after.some((p) => p.pid === sleeper.pid));
    });

    it("processes survive disconnect; connect re-attaches, several clients at once", async () => {
      const h1 = await sbx.commands.run("for i in $(seq 1 30); do echo tick $i; sleep 0.1; done", {
        background: true,
        timeoutMs: 0,
      });
      await until(() => h1.stdout.includes("tick 2"), 3000, "first ticks");
      await h1.disconnect();
      await sleep(200);
      assert.ok(
        (await sbx.commands.list()).some((p) => p.pid === h1.pid),
        "still running after disconnect",
      );

      const seenA: string[] = [];
      const seenB: string[] = [];
      const a = await sbx.commands.connect(h1.pid, { onStdout: (d) => void seenA.push(d), timeoutMs: 0 });
      const b = await sbx.commands.connect(h1.pid, { onStdout: (d) => void seenB.push(d), timeoutMs: 0 });
      const [ra, rb] = await Promise.all([a.wait(), b.wait()]);
      assert.equal(ra.exitCode, 0);
      assert.equal(rb.exitCode, 0);
      assert.match(seenA.join(""), /tick 30/);
      assert.match(seenB.join(""), /tick 30/);
      assert.doesNotMatch(seenA.join(""), /tick 1\n/, "output produced before connect is not replayed");

      // an exited process still reports its result
      const again = await sbx.commands.connect(h1.pid);
      assert.equal((await again.wait()).exitCode, 0);
    });

    it("timeoutMs is the process lifetime", async () => {
      const t0 = Date.now();
      // E2B's envd ends the stream with deadline_exceeded: the SDK's TimeoutError.
      await assert.rejects(sbx.commands.run("sleep 20; echo never", { timeoutMs: 800 }), TimeoutError);
      assert.ok(Date.now() - t0 < 5000);
      await until(
        async () => !(await sbx.commands.list()).some((p) => p.args.includes("sleep 20; echo never")),
        3000,
        "killed",
      );
    });

    it("sends keepalives on idle streams", async () => {
      // Keepalive-Ping-Interval is fixed by the SDK (50 s); check the raw stream instead.
      const body = JSON.stringify({ process: { cmd: "/bin/sh", args: ["-c", "sleep 1.3; echo done"] }, stdin: false });
      const env = Buffer.alloc(5 + Buffer.byteLength(body));
      env.writeUInt32BE(Buffer.byteLength(body), 1);
      env.write(body, 5);
      const res = await fetch(`${h.envdUrl}/process.Process/Start`, {
        method: "POST",
        headers: {
          "content-type": "application/connect+json",
          "connect-protocol-version": "1",
          "keepalive-ping-interval": "1",
          "x-access-token": "test-token-123",
        },
        body: env,
      });
      assert.equal(res.status, 200);
      const buf = Buffer.from(await res.arrayBuffer());
      const msgs: { flags: number; json: unknown }[] = [];
      for (let off = 0; off < buf.length; ) {
        const len = buf.readUInt32BE(off + 1);
        msgs.push({ flags: buf[off] ?? -1, json: JSON.parse(buf.subarray(off + 5, off + 5 + len).toString()) });
        off += 5 + len;
      }
      const kinds = msgs.map((m) => (m.flags === 2 ? "eos" : Object.keys((m.json as { event: object }).event)[0]));
      assert.equal(kinds[0], "start");
      assert.ok(kinds.includes("keepalive"), `no keepalive in ${kinds}`);
      assert.deepEqual(kinds.slice(-3), ["data", "end", "eos"]);
      assert.deepEqual(msgs.at(-1)?.json, {});
    });
  });

  describe("pty", () => {
    it("create, input, resize, kill", async () => {
      const chunks: Uint8Array[] = [];
      const text = () => Buffer.concat(chunks).toString("utf8");
      const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => void chunks.push(d), timeoutMs: 0 });
      await sbx.pty.sendInput(term.pid, new TextEncoder().encode("stty size; echo pty-$((40+2))\n"));
      await until(() => /24 80/.test(text()) && /pty-42/.test(text()), 5000, "pty output");
      await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
      await sbx.pty.sendInput(term.pid, new TextEncoder().encode("stty size\n"));
      await until(() => /30 100/.test(text()), 5000, "resized");
      const listed = await sbx.commands.list();
      assert.ok(
        listed.some((p) => p.pid === term.pid),
        "pty listed",
      );
      await assert.rejects(sbx.commands.closeStdin(term.pid));
      assert.equal(await sbx.pty.kill(term.pid), true);
      await assert.rejects(term.wait(), CommandExitError);
    });

    const hasSetpriv = ["/usr/bin/setpriv", "/bin/setpriv"].some((p) => existsSync(p));
    it("runs as the requested user without envd's groups", { skip: !hasSetpriv && "no setpriv" }, async () => {
      let out = "";
      const term = await sbx.pty.create({
        cols: 80,
        rows: 24,
        onData: (d) => {
          out += Buffer.from(d).toString();
        },
        user: "nobody" as "root",
      });
      await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo ids=$(id -u):$(id -G | tr ' ' ,); exit\n"));
      await term.wait().catch(() => {});
      assert.match(out, /ids=65534:65534\r?\n/);
    });

    it("exits with the shell's exit code", async () => {
      const term = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {}, user: "root" });
      await sbx.pty.sendInput(term.pid, new TextEncoder().encode("exit 0\n"));
      const r = await term.wait();
      assert.equal(r.exitCode, 0);
    });
  });

  describe("auth", () => {
    it("a wrong token gives AuthenticationError", async () => {
      const bad = await h.connect({ token: "wrong" });
      await assert.rejects(bad.commands.run("true"), AuthenticationError);
      await assert.rejects(bad.files.read("/etc/hostname"), AuthenticationError);
      await assert.rejects(bad.files.list("/"), AuthenticationError);
      assert.equal(await bad.isRunning(), true); // /health needs no token
    });
  });
});
