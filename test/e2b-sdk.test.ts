// The e2b SDK compatibility suite: the unmodified `e2b` npm package (2.51.0, latest) drives a
// real aenv-server whose sandboxes are real runsc sandboxes.
import assert from "node:assert/strict";
import { get as httpGet, type IncomingHttpHeaders } from "node:http";
import { after, before, describe, test } from "node:test";
import { gunzipSync } from "node:zlib";
import { CommandExitError, FileNotFoundError, FilesystemEventType, NotFoundError, Sandbox, TimeoutError } from "e2b";
import { untilTrue } from "./helpers/sandbox.js";
import { cleanupDataDir, startServer, type TestServer, useE2b, waitFor } from "./helpers/server.js";

let server: TestServer;
let sbx: Sandbox;

before(async () => {
  server = await startServer();
  useE2b(server);
  sbx = await Sandbox.create({
    metadata: { suite: "e2b", run: String(process.pid) },
    envs: { GLOBAL_VAR: "from-create" },
  });
});

after(async () => {
  await sbx?.kill().catch(() => {});
  await server?.stop();
  if (server) cleanupDataDir(server);
});

describe("sandbox lifecycle", () => {
  test("create returns a usable sandbox with info", async () => {
    assert.match(sbx.sandboxId, /^i[a-z0-9]{20}$/);
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, "base");
    assert.equal(info.state, "running");
    assert.equal(info.metadata.suite, "e2b");
    assert.ok(info.endAt.getTime() > Date.now());
    assert.equal(await sbx.isRunning(), true);
  });

  test("setTimeout moves endAt", async () => {
    await sbx.setTimeout(600_000);
    const info = await sbx.getInfo();
    const left = info.endAt.getTime() - Date.now();
    assert.ok(left > 590_000 && left <= 600_000, `endAt ${left} ms away`);
  });

  test("list filters by metadata and paginates", async () => {
    const other = await Sandbox.create({ metadata: { suite: "e2b-list", "k&": "v=1 x" } });
    try {
      const p = Sandbox.list({ query: { metadata: { "k&": "v=1 x" } } });
      const items = await p.nextItems();
      assert.deepEqual(
        items.map((i) => i.sandboxId),
        [other.sandboxId],
      );
      assert.equal(items[0]?.state, "running");
      const paged = Sandbox.list({ limit: 1, query: { state: ["running"] } });
      const first = await paged.nextItems();
      assert.equal(first.length, 1);
      assert.equal(paged.hasNext, true);
      const second = await paged.nextItems();
      assert.equal(second.length, 1);
      assert.notEqual(first[0]?.sandboxId, second[0]?.sandboxId);
    } finally {
      assert.equal(await other.kill(), true);
    }
  });

  test("metrics report memory and cpu", async () => {
    const m = await sbx.getMetrics();
    assert.ok(m.length >= 1);
    const x = m.at(-1);
    assert.ok(x && x.memTotal > 0);
    // From the sandbox's cgroup: an idle base sandbox holds some tens of MiB, within its limit.
    assert.ok(x.memUsed > 1 << 20 && x.memUsed < x.memTotal, `memUsed ${x.memUsed} of ${x.memTotal}`);
    assert.ok(x.cpuUsedPct >= 0 && x.cpuUsedPct <= 100 * x.cpuCount, `cpuUsedPct ${x.cpuUsedPct}`);
  });

  test("unknown sandbox ids give the SDK's not-found outcomes", async () => {
    const ghost = "i00000000000000000000";
    assert.equal(await Sandbox.kill(ghost), false);
    await assert.rejects(
      Sandbox.getInfo(ghost),
      (e: Error) => e.name === "SandboxNotFoundError" || e instanceof NotFoundError,
    );
    await assert.rejects(Sandbox.connect(ghost), (e: Error) => /not found/i.test(e.message));
    await assert.rejects(Sandbox.setTimeout(ghost, 1000), (e: Error) => /not found/i.test(e.message));
  });

  test("connect to a running sandbox extends but never shortens its TTL", async () => {
    const before_ = (await sbx.getInfo()).endAt.getTime();
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 10_000 });
    assert.equal(again.sandboxId, sbx.sandboxId);
    const after_ = (await sbx.getInfo()).endAt.getTime();
    assert.ok(after_ >= before_);
    const r = await again.commands.run("echo via-connect");
    assert.equal(r.stdout, "via-connect\n");
  });

  test("creates retried with one idempotency key give one sandbox, on a node of its own too", async () => {
    const opts = { metadata: { "aenv.idempotency_key": `e2b-suite-${process.pid}` } };
    const [a, b] = await Promise.all([Sandbox.create(opts), Sandbox.create(opts)]);
    try {
      assert.equal(a.sandboxId, b.sandboxId);
      assert.equal((await b.commands.run("echo one")).stdout, "one\n");
      assert.equal((await Sandbox.create(opts)).sandboxId, a.sandboxId, "a later retry");
      const bad = await fetch(`${server.url}/sandboxes`, {
        method: "POST",
        headers: { "x-api-key": server.apiKey, "content-type": "application/json", "idempotency-key": "has space" },
        body: JSON.stringify({ templateID: "base" }),
      });
      assert.equal(bad.status, 400);
    } finally {
      await a.kill();
    }
  });

  test("kill removes the sandbox", async () => {
    const s = await Sandbox.create();
    assert.equal(await s.kill(), true);
    assert.equal(await s.isRunning(), false);
    assert.equal(await Sandbox.kill(s.sandboxId), false);
  });
});

describe("commands", () => {
  test("foreground run with stdout, stderr, exit code", async () => {
    const r = await sbx.commands.run("echo hello; echo warn >&2");
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "hello\n");
    assert.equal(r.stderr, "warn\n");
    await assert.rejects(sbx.commands.run("exit 3"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 3);
  });

  test("envs, cwd, sandbox-wide env and users", async () => {
    const r = await sbx.commands.run('echo "$FOO|$GLOBAL_VAR|$(pwd)|$(whoami)|$HOME"', {
      envs: { FOO: "bar" },
      cwd: "/tmp",
    });
    assert.equal(r.stdout, "bar|from-create|/tmp|user|/home/user\n");
    const root = await sbx.commands.run("whoami; pwd", { user: "root" });
    // Like E2B: the template workdir is the default cwd for every user.
    assert.equal(root.stdout, "root\n/home/user\n");
    await assert.rejects(sbx.commands.run("true", { cwd: "/does/not/exist" }));
  });

  test("streaming callbacks see output as it is produced", async () => {
    const seen: Array<{ t: number; s: string }> = [];
    const t0 = Date.now();
    await sbx.commands.run("echo one; sleep 1; echo two", {
      onStdout: (s) => {
        seen.push({ t: Date.now() - t0, s });
      },
    });
    assert.deepEqual(seen.map((x) => x.s).join(""), "one\ntwo\n");
    assert.ok(seen.length >= 2 && (seen[1]?.t ?? 0) - (seen[0]?.t ?? 0) >= 700, JSON.stringify(seen));
  });

  test("background process with stdin, list, connect, kill", async () => {
    const h = await sbx.commands.run("cat", { background: true, stdin: true, timeoutMs: 0 });
    assert.ok(h.pid > 0);
    const listed = await sbx.commands.list();
    const mine = listed.find((p) => p.pid === h.pid);
    assert.ok(mine, "process listed");
    assert.equal(mine?.cmd, "/bin/bash");
    await sbx.commands.sendStdin(h.pid, "ping\n");
    let attached = "";
    const h2 = await sbx.commands.connect(h.pid, {
      onStdout: (s) => {
        attached += s;
      },
    });
    await sbx.commands.sendStdin(h.pid, "pong\n");
    await sbx.commands.closeStdin(h.pid);
    const res = await h2.wait();
    assert.equal(res.exitCode, 0);
    assert.match(attached, /pong/);
    const gone = await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    assert.equal(await sbx.commands.kill(gone.pid), true);
    await assert.rejects(gone.wait(), (e: unknown) => e instanceof CommandExitError);
    assert.equal(await sbx.commands.kill(999999), false);
  });

  test("a background process outlives its client's disconnect", async () => {
    const h = await sbx.commands.run("sleep 2; echo done > /tmp/bg-done", { background: true, timeoutMs: 0 });
    await h.disconnect();
    await untilTrue(sbx, "test -s /tmp/bg-done");
    const r = await sbx.commands.run("cat /tmp/bg-done");
    assert.equal(r.stdout, "done\n");
  });

  test("orphaned background processes are reaped, not left as zombies", async () => {
    await sbx.commands.run("for i in 1 2 3 4 5; do (sleep 0.2 &) ; done; true");
    // Each sleep ends after 0.2 s: its zombie must be gone soon after.
    await untilTrue(sbx, `[ "$(ps -eo stat= | grep -c '^Z')" = 0 ]`, 10);
    const init = await sbx.commands.run("cat /proc/1/cmdline | tr '\\0' ' '");
    assert.match(init.stdout, /aenv-init/);
  });

  test("the default template has what E2B's base has: Node.js LTS with npm and npx, Python", async () => {
    // ComputeSDK's public benchmark runs `node -v` as its first command; agents expect npm.
    const r = await sbx.commands.run("node -v; npm -v; npx -v; python --version; command -v node");
    const [node, npm, npx, python, path] = r.stdout.trim().split("\n");
    assert.match(node ?? "", /^v(2[4-9]|[3-9]\d)\.\d+\.\d+$/, "an LTS line from 24 on");
    assert.match(npm ?? "", /^\d+\.\d+\.\d+$/);
    assert.equal(npx, npm);
    assert.match(python ?? "", /^Python 3\./);
    assert.equal(path, "/usr/local/bin/node");
    // npm works for the sandbox's user: it can make a package and run its script.
    const pkg = await sbx.commands.run(
      "mkdir -p /tmp/npm-t && cd /tmp/npm-t && npm init -y >/dev/null && npm pkg set scripts.hi='node -e \"console.log(6*7)\"' && npm run -s hi",
    );
    assert.equal(pkg.stdout, "42\n");
  });

  test("init's spawn-service variable never reaches a command", async () => {
    const r = await sbx.commands.run('echo "${AENV_SPAWN_SOCKET:-unset}"');
    assert.equal(r.stdout, "unset\n");
  });

  test("the runtime folder holds envd and its tools, no node; envd starts commands itself", async () => {
    const bin = await sbx.commands.run("ls /.aenv/bin; ls /.aenv");
    assert.match(bin.stdout, /^envd$/m);
    assert.doesNotMatch(bin.stdout, /^(node|lib)$/m);
    const parent = (await sbx.commands.run("echo $PPID; cat /proc/$PPID/cmdline | tr '\\0' ' '")).stdout;
    assert.match(parent, /^\d+\n\/\.aenv\/bin\/envd /);
  });

  test("timeoutMs bounds a command's lifetime: the SDK's TimeoutError, as on E2B", async () => {
    // E2B's envd ends the stream with deadline_exceeded; the SDKs make it their timeout error.
    await assert.rejects(sbx.commands.run("sleep 30", { timeoutMs: 1500 }), TimeoutError);
    const r = await sbx.commands.run("pgrep -x sleep -a || true");
    assert.doesNotMatch(r.stdout, /sleep 30/);
  });

  test("pty: interactive shell, resize, exit code", async () => {
    let out = "";
    const dec = new TextDecoder();
    const pty = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => {
        out += dec.decode(d);
      },
      timeoutMs: 30_000,
    });
    await sbx.pty.resize(pty.pid, { cols: 123, rows: 45 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode("stty size; tty; exit 7\n"));
    const res = await pty.wait().catch((e: unknown) => e as CommandExitError);
    assert.equal(res.exitCode, 7);
    assert.match(out, /45 123/);
    assert.match(out, /\/dev\/pts\//);
  });
});

describe("files", () => {
  test("write and read text, binary, and multiple files", async () => {
    await sbx.files.write("/home/user/a.txt", "content");
    assert.equal(await sbx.files.read("/home/user/a.txt"), "content");
    const bin = new Uint8Array(256 * 1024).map((_, i) => (i * 7) % 256);
    await sbx.files.write("/home/user/bin.dat", bin.buffer);
    const back = await sbx.files.read("/home/user/bin.dat", { format: "bytes" });
    assert.deepEqual(Buffer.from(back), Buffer.from(bin));
    await sbx.files.write([
      { path: "/home/user/multi/b.txt", data: "B" },
      { path: "rel/c.txt", data: "C" },
    ]);
    assert.equal(await sbx.files.read("/home/user/multi/b.txt"), "B");
    assert.equal(await sbx.files.read("/home/user/rel/c.txt"), "C");
    const owner = await sbx.commands.run("stat -c %U /home/user/rel/c.txt");
    assert.equal(owner.stdout.trim(), "user");
  });

  test("octet-stream and gzip uploads", async () => {
    await sbx.files.write("/home/user/o.txt", "octet", { useOctetStream: true } as never);
    assert.equal(await sbx.files.read("/home/user/o.txt"), "octet");
    await sbx.files.write("/home/user/g.txt", "gzipped body", { gzip: true } as never);
    assert.equal(await sbx.files.read("/home/user/g.txt"), "gzipped body");
  });

  test("downloads are gzip when the client asks, as from E2B's envd; 406 when nothing it takes is offered", async () => {
    const body = "compressible ".repeat(4096);
    await sbx.files.write("/home/user/z.txt", body);
    assert.equal(await sbx.files.read("/home/user/z.txt", { gzip: true } as never), body);
    // node:http, which neither asks for nor undoes an encoding on its own.
    const url = await sbx.downloadUrl("/home/user/z.txt");
    const get = (accept?: string) =>
      new Promise<{ status: number; headers: IncomingHttpHeaders; bytes: Buffer }>((resolve, reject) => {
        httpGet(url, { headers: accept === undefined ? {} : { "accept-encoding": accept } }, (res) => {
          const parts: Buffer[] = [];
          res.on("data", (d: Buffer) => parts.push(d));
          res.on("end", () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, bytes: Buffer.concat(parts) }),
          );
          res.on("error", reject);
        }).on("error", reject);
      });
    const zipped = await get("gzip, deflate");
    assert.equal(zipped.status, 200);
    assert.equal(zipped.headers["content-encoding"], "gzip");
    assert.ok(zipped.bytes.length < body.length / 10, `${zipped.bytes.length} bytes for ${body.length}`);
    assert.equal(gunzipSync(zipped.bytes).toString(), body);
    const plain = await get();
    assert.equal(plain.headers["content-encoding"], undefined);
    assert.equal(plain.headers["content-length"], String(body.length));
    assert.equal(plain.bytes.toString(), body);
    const refused = await get("br, identity;q=0");
    assert.equal(refused.status, 406);
    assert.match(
      JSON.parse(refused.bytes.toString()).message,
      /no acceptable encoding found, supported: \[identity, gzip\]/,
    );
  });

  test("list with depth, exists, getInfo, makeDir, rename, remove", async () => {
    await sbx.files.write("/home/user/tree/x/y/z.txt", "z");
    const d1 = await sbx.files.list("/home/user/tree");
    assert.deepEqual(
      d1.map((e) => e.name),
      ["x"],
    );
    const d3 = await sbx.files.list("/home/user/tree", { depth: 3 });
    assert.deepEqual(d3.map((e) => e.path).sort(), [
      "/home/user/tree/x",
      "/home/user/tree/x/y",
      "/home/user/tree/x/y/z.txt",
    ]);
    assert.equal(await sbx.files.exists("/home/user/tree/x/y/z.txt"), true);
    assert.equal(await sbx.files.exists("/home/user/nope"), false);
    const info = await sbx.files.getInfo("/home/user/tree/x/y/z.txt");
    assert.equal(info.type, "file");
    assert.equal(info.size, 1);
    assert.equal(await sbx.files.makeDir("/home/user/newdir/sub"), true);
    assert.equal(await sbx.files.makeDir("/home/user/newdir/sub"), false);
    const moved = await sbx.files.rename("/home/user/tree/x/y/z.txt", "/home/user/moved.txt");
    assert.equal(moved.path, "/home/user/moved.txt");
    await sbx.files.remove("/home/user/moved.txt");
    assert.equal(await sbx.files.exists("/home/user/moved.txt"), false);
    await assert.rejects(sbx.files.read("/home/user/moved.txt"), (e: unknown) => e instanceof FileNotFoundError);
  });

  test("watchDir reports creates and writes", async () => {
    await sbx.files.makeDir("/home/user/watched");
    const events: string[] = [];
    const w = await sbx.files.watchDir(
      "/home/user/watched",
      (e) => {
        events.push(`${e.type}:${e.name}`);
      },
      {
        recursive: true,
      },
    );
    await sbx.files.write("/home/user/watched/new.txt", "1");
    await sbx.commands.run("mkdir -p /home/user/watched/d && echo 2 > /home/user/watched/d/inner.txt");
    const deadline = Date.now() + 5000;
    while (
      Date.now() < deadline &&
      !(events.some((e) => e.endsWith("new.txt")) && events.some((e) => e.includes("inner.txt")))
    ) {
      await new Promise((r) => setTimeout(r, 100));
    }
    await w.stop();
    assert.ok(
      events.some((e) => e.endsWith(":new.txt")),
      events.join(","),
    );
    assert.ok(
      events.some((e) => e.endsWith("d/inner.txt")),
      events.join(","),
    );
  });

  test("an upload into a watched directory reads as E2B's envd: CREATE, CHMOD, WRITE", async () => {
    // E2B's Python SDK (test_watch_iterated) counts three events for a new file: its envd
    // creates the file in place, chowns it to the user, then writes it.
    await sbx.files.makeDir("/home/user/watched-up");
    const events: { type: FilesystemEventType; name: string }[] = [];
    const w = await sbx.files.watchDir("/home/user/watched-up", (e) => {
      events.push({ type: e.type, name: e.name });
    });
    // Events come in order: once a later marker's CREATE is in, the upload's are all in.
    const through = async (marker: string) => {
      await sbx.files.makeDir(`/home/user/watched-up/${marker}`);
      await waitFor(`${marker} created`, () =>
        events.some((e) => e.name === marker && e.type === FilesystemEventType.CREATE),
      );
    };
    const of = (name: string) => events.filter((e) => e.name === name).map((e) => e.type);
    await sbx.files.write("/home/user/watched-up/up.txt", "This file will be watched.");
    await through("m1");
    assert.deepEqual(of("up.txt"), [FilesystemEventType.CREATE, FilesystemEventType.CHMOD, FilesystemEventType.WRITE]);
    // over an existing file: the chown, then the truncation and the data (one WRITE or two)
    events.length = 0;
    await sbx.files.write("/home/user/watched-up/up.txt", "This file has been modified.");
    await through("m2");
    const again = of("up.txt");
    assert.equal(again[0], FilesystemEventType.CHMOD, JSON.stringify(again));
    assert.ok(again.length >= 2 && again.slice(1).every((t) => t === FilesystemEventType.WRITE), JSON.stringify(again));
    await w.stop();
    assert.equal(await sbx.files.read("/home/user/watched-up/up.txt"), "This file has been modified.");
    const info = await sbx.files.getInfo("/home/user/watched-up/up.txt");
    assert.equal(info.owner, "user");
    // written in place, the file keeps its xattrs: an upload still replaces its metadata set
    await sbx.files.write("/home/user/watched-up/up.txt", "m", { metadata: { a: "1", b: "2" } });
    await sbx.files.write("/home/user/watched-up/up.txt", "m", { metadata: { b: "3" } });
    assert.deepEqual((await sbx.files.getInfo("/home/user/watched-up/up.txt")).metadata, { b: "3" });
    await sbx.files.write("/home/user/watched-up/up.txt", "m");
    assert.equal((await sbx.files.getInfo("/home/user/watched-up/up.txt")).metadata, undefined);
  });

  test("signed upload and download URLs work as the SDK gives them, without the access token", async () => {
    // With E2B_SANDBOX_URL pointing here the URLs name no sandbox: the signature does.
    const up = await sbx.uploadUrl("/home/user/signed.txt", { useSignatureExpiration: 60 });
    assert.equal(new URL(up).origin, server.url);
    const form = new FormData();
    form.append("file", new Blob(["signed!"]), "/home/user/signed.txt");
    const upR = await fetch(up, { method: "POST", body: form });
    assert.equal(upR.status, 200);
    const r = await fetch(await sbx.downloadUrl("/home/user/signed.txt"));
    assert.equal(await r.text(), "signed!");
    // A `file` part without a filename (FormData.append("file", "text")) is the content too,
    // byte for byte.
    const text = new FormData();
    text.append("file", "plain é");
    const upT = await fetch(await sbx.uploadUrl("/home/user/text.txt"), { method: "POST", body: text });
    assert.deepEqual(await upT.json(), [{ name: "text.txt", path: "/home/user/text.txt", type: "file" }]);
    assert.equal(await sbx.files.read("/home/user/text.txt"), "plain é");
    // The same signature with another path is no one's; a malformed one is refused at once.
    const altered = new URL(await sbx.downloadUrl("/home/user/signed.txt"));
    altered.searchParams.set("path", "/etc/passwd");
    const alteredR = await fetch(altered);
    assert.equal(alteredR.status, 401);
    assert.match(((await alteredR.json()) as { message: string }).message, /no sandbox here signed this URL/);
    const bad = await fetch(`${server.url}/files?path=/etc/passwd&signature=v1_bogus`);
    assert.equal(bad.status, 401);
    const badEnvd = await fetch(`${server.url}/files?path=/etc/passwd&signature=v1_bogus`, {
      headers: { "e2b-sandbox-id": sbx.sandboxId },
    });
    assert.equal(badEnvd.status, 401);
  });
});
