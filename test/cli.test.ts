import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { resolveConfig } from "../packages/cli/src/config.js";
import { formatTable, outputMode } from "../packages/cli/src/output.js";
import { collectKeyValue, commandLine, metadataQuery, parsePositiveInt } from "../packages/cli/src/parse.js";
import { buildProgram, run } from "../packages/cli/src/program.js";
import { AENV_BIN, cliRunner } from "./helpers/cli.js";
import { cleanupDataDir, startServer, type TestServer } from "./helpers/server.js";

const BIN = AENV_BIN;

describe("cli: pure functions", () => {
  test("K=V options accumulate; '=' in values is kept; bad pairs are errors", () => {
    let m = collectKeyValue("a=1");
    m = collectKeyValue("b=x=y", m);
    assert.deepEqual(m, { a: "1", b: "x=y" });
    assert.throws(() => collectKeyValue("novalue"), /expected KEY=VALUE/);
    assert.throws(() => collectKeyValue("=v"), /expected KEY=VALUE/);
  });
  test("positive ints, metadata query, command join", () => {
    assert.equal(parsePositiveInt("--count", 100)("4"), 4);
    assert.throws(() => parsePositiveInt("--count", 100)("0"), /between 1 and 100/);
    assert.throws(() => parsePositiveInt("--count")("-3"), /positive integer/);
    assert.equal(metadataQuery({ a: "1", "b c": "x&y" }), "a=1&b%20c=x%26y");
    // Several words are an argv: each is quoted so the shell sees exactly those words.
    assert.equal(commandLine(["echo", "hi", "&&", "exit", "3"]), "echo hi '&&' exit 3");
    assert.equal(commandLine(["sh", "-c", 'echo "a  b"; exit 3']), `sh -c 'echo "a  b"; exit 3'`);
    assert.equal(commandLine(["printf", "%s", "it's"]), String.raw`printf %s 'it'\''s'`);
    // One word is a shell command line, untouched.
    assert.equal(commandLine(["ls | wc -l"]), "ls | wc -l");
    assert.throws(() => commandLine([]), /missing command/);
    assert.throws(() => commandLine(["  "]), /missing command/);
  });
  test("output mode: json when piped or asked; table on a TTY", () => {
    assert.equal(outputMode(undefined, true), "table");
    assert.equal(outputMode(undefined, false), "json");
    assert.equal(outputMode(undefined, undefined), "json");
    assert.equal(outputMode("json", true), "json");
    assert.equal(outputMode("table", false), "table");
  });
  test("table formatting aligns columns and renders maps", () => {
    const t = formatTable(
      [
        { id: "abc", m: { k: "v" } },
        { id: "a", m: {} },
      ],
      [
        { header: "ID", get: (r) => r.id },
        { header: "META", get: (r) => r.m },
      ],
    );
    assert.equal(t, "ID   META\nabc  k=v\na");
  });
  test("config: env overrides the credentials file; default URL", () => {
    assert.deepEqual(resolveConfig({}, {}), { apiUrl: "http://127.0.0.1:8000", apiKey: undefined });
    assert.deepEqual(resolveConfig({}, { apiUrl: "http://h:1/", apiKey: "k" }), { apiUrl: "http://h:1", apiKey: "k" });
    assert.deepEqual(
      resolveConfig({ AENV_API_URL: "http://e:2", AENV_API_KEY: "ek" }, { apiUrl: "http://h:1", apiKey: "k" }),
      {
        apiUrl: "http://e:2",
        apiKey: "ek",
      },
    );
    assert.throws(() => resolveConfig({ AENV_API_URL: "ftp://x" }, {}), /invalid server URL/);
  });
  test("argument parsing: commands, aliases, options and usage errors", async () => {
    const p = buildProgram();
    const names = p.commands.map((c) => c.name());
    for (const n of [
      "auth",
      "ls",
      "start",
      "connect",
      "exec",
      "upload",
      "download",
      "pause",
      "resume",
      "rm",
      "timeout",
      "fork",
      "snapshot",
      "template",
      "pull",
      "build",
      "completion",
    ])
      assert.ok(names.includes(n), n);
    assert.ok(
      p.commands
        .find((c) => c.name() === "connect")
        ?.aliases()
        .includes("cn"),
    );
    assert.ok(
      p.commands
        .find((c) => c.name() === "ls")
        ?.aliases()
        .includes("list"),
    );
    let err = "";
    const io = { writeErr: (s: string) => (err += s), writeOut: () => undefined };
    assert.equal(await run(["bogus"], io), 1);
    assert.match(err, /^aenv: unknown command 'bogus'/);
    err = "";
    assert.equal(await run(["fork", "x", "--count", "zero"], io), 1);
    assert.equal(err, "aenv: --count must be a positive integer, got 'zero'\n");
    err = "";
    assert.equal(await run(["pull", "x", "--probe", "80", "--ready-cmd", "true"], io), 1);
    assert.match(err, /give --ready-cmd or --probe, not both/);
    err = "";
    assert.equal(await run(["completion", "tcsh"], io), 1);
    assert.match(err, /unknown shell/);
    assert.equal(await run(["--help"], io), 0);
  });
});

describe("cli: end to end against a real server", () => {
  let server: TestServer;
  const created = new Set<string>();
  const snapshots = new Set<string>();
  const tmp = mkdtempSync("/tmp/aenv-cli-test-");
  const env = () => ({ ...process.env, AENV_API_URL: server.url, AENV_API_KEY: server.apiKey, XDG_CONFIG_HOME: tmp });
  const { aenv, ok } = cliRunner(env);

  before(async () => {
    server = await startServer();
  });
  after(async () => {
    for (const s of snapshots) await server?.api("DELETE", `/templates/${s}`).catch(() => undefined);
    for (const id of created) await server?.api("DELETE", `/sandboxes/${id}`).catch(() => undefined);
    await server?.stop();
    if (server) cleanupDataDir(server);
    rmSync(tmp, { recursive: true, force: true });
  });

  test("lifecycle: start, ls, exec, files, pause/resume, snapshot, fork, rm", async () => {
    const start = await ok(
      "start",
      "--detach",
      "--timeout",
      "300",
      "--metadata",
      "suite=cli",
      "--env",
      "GREETING=hello",
    );
    const sbx = JSON.parse(start.stdout) as { sandboxID: string };
    assert.match(sbx.sandboxID, /\S+/);
    const id = sbx.sandboxID;
    created.add(id);

    const ls = JSON.parse((await ok("ls", "--metadata", "suite=cli")).stdout) as Array<{
      sandboxID: string;
      state: string;
    }>;
    assert.deepEqual(
      ls.map((s) => [s.sandboxID, s.state]),
      [[id, "running"]],
    );
    const table = await ok("ls", "-o", "table");
    assert.match(table.stdout, /^ID\s+TEMPLATE\s+STATE/);
    assert.ok(table.stdout.includes(id));

    const ex = await aenv("exec", id, "--", "echo out-$GREETING; echo err >&2; exit 7");
    assert.equal(ex.code, 7, ex.stderr);
    assert.equal(ex.stdout, "out-hello\n");
    assert.equal(ex.stderr, "err\n");
    assert.equal((await ok("exec", id, "--", "true")).stdout, "");
    // Several words are an argv, run exactly: the two spaces and the exit code survive.
    const argv = await aenv("exec", id, "--", "sh", "-c", 'echo "a  b"; echo e >&2; exit 3');
    assert.equal(argv.code, 3, argv.stderr);
    assert.equal(argv.stdout, "a  b\n");
    assert.equal(argv.stderr, "e\n");
    assert.equal((await ok("exec", id, "--", "printf", "%s|", "it's", "$HOME", "*")).stdout, "it's|$HOME|*|");

    const local = join(tmp, "up.bin");
    const payload = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 251));
    writeFileSync(local, payload);
    await ok("upload", id, local, "/home/user/dir/up.bin");
    assert.equal((await ok("exec", id, "--", "wc -c < /home/user/dir/up.bin")).stdout.trim(), "70000");
    await ok("download", id, "/home/user/dir", join(tmp, "down"));
    assert.ok(readFileSync(join(tmp, "down", "up.bin")).equals(payload));

    await ok("pause", id);
    assert.equal((JSON.parse((await ok("ls", "--state", "paused")).stdout) as unknown[]).length, 1);
    await ok("resume", id);
    assert.equal((await ok("exec", id, "--", "cat /home/user/dir/up.bin | wc -c")).stdout.trim(), "70000");
    await ok("timeout", id, "600");

    const snap = JSON.parse((await ok("snapshot", "create", id, "--name", "cli-snap")).stdout) as {
      snapshotID: string;
    };
    snapshots.add(snap.snapshotID);
    const snaps = JSON.parse((await ok("snapshot", "ls", "--sandbox", id)).stdout) as Array<{
      snapshotID: string;
      names: string[];
    }>;
    assert.deepEqual(
      snaps.map((s) => s.snapshotID),
      [snap.snapshotID],
    );
    await ok("snapshot", "rm", snap.snapshotID);
    snapshots.delete(snap.snapshotID);
    assert.deepEqual(JSON.parse((await ok("snapshot", "ls", "--sandbox", id)).stdout), []);

    const forks = JSON.parse((await ok("fork", id, "--count", "2")).stdout) as Array<{
      sandboxID: string;
      error: string;
    }>;
    assert.equal(forks.length, 2);
    for (const f of forks) {
      assert.equal(f.error, "");
      created.add(f.sandboxID);
      assert.equal((await ok("exec", f.sandboxID, "--", "wc -c < /home/user/dir/up.bin")).stdout.trim(), "70000");
    }
    for (const f of forks) {
      await ok("rm", f.sandboxID);
      created.delete(f.sandboxID);
    }
    await ok("rm", id);
    created.delete(id);
    assert.deepEqual(JSON.parse((await ok("ls")).stdout), []);
  });

  test("errors: unknown sandbox and bad key; template listing", async () => {
    for (const args of [
      ["rm", "nope123"],
      ["exec", "nope123", "--", "true"],
      ["pause", "nope123"],
    ]) {
      const r = await aenv(...args);
      assert.equal(r.code, 1, args.join(" "));
      assert.equal(r.stdout, "");
      assert.match(r.stderr, /^aenv: .*nope123.*\n$/, `${args.join(" ")}: ${r.stderr}`);
    }
    const t = await aenv("template", "ls");
    assert.equal(t.code, 0, t.stderr);
    const templates = JSON.parse(t.stdout) as Array<{ templateID: string; aliases: string[] }>;
    assert.ok(templates.some((x) => x.templateID === "base" && x.aliases.includes("base")));
    const bad = spawnSync(process.execPath, [BIN, "ls"], {
      env: { ...env(), AENV_API_KEY: "wrong" },
      encoding: "utf8",
    });
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /^aenv: .*HTTP 401.*\n$/);
  });

  test("auth --url --key validates and saves credentials (0600)", async () => {
    const r = spawnSync(process.execPath, [BIN, "auth", "--url", server.url, "--key", server.apiKey], {
      env: { ...process.env, XDG_CONFIG_HOME: tmp, AENV_API_URL: "", AENV_API_KEY: "" },
      encoding: "utf8",
    });
    assert.equal(r.status, 0, r.stderr);
    const path = join(tmp, "aenv", "credentials");
    assert.deepEqual(JSON.parse(readFileSync(path, "utf8")), { apiUrl: server.url, apiKey: server.apiKey });
    const { statSync } = await import("node:fs");
    assert.equal(statSync(path).mode & 0o777, 0o600);
    const ls = spawnSync(process.execPath, [BIN, "ls"], {
      env: { ...process.env, XDG_CONFIG_HOME: tmp, AENV_API_URL: "", AENV_API_KEY: "" },
      encoding: "utf8",
    });
    assert.equal(ls.status, 0, ls.stderr);
    const badAuth = spawnSync(process.execPath, [BIN, "auth", "--url", server.url, "--key", "wrong"], {
      env: { ...process.env, XDG_CONFIG_HOME: tmp },
      encoding: "utf8",
    });
    assert.equal(badAuth.status, 1);
    assert.deepEqual(JSON.parse(readFileSync(path, "utf8")).apiKey, server.apiKey);
  });
});

describe("cli: interactive shell through tmux", {
  skip: spawnSync("tmux", ["-V"]).status !== 0 && "tmux not installed",
}, () => {
  let server: TestServer;
  let id = "";
  const session = `aenv-cli-${process.pid}`;
  const tmux = (...args: string[]) => spawnSync("tmux", args, { encoding: "utf8" });
  const pane = () => tmux("capture-pane", "-p", "-t", session).stdout;
  const waitFor = async (re: RegExp, what: string, ms = 20_000) => {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      if (re.test(pane())) return;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.fail(`timed out waiting for ${what}; pane:\n${pane()}`);
  };
  const tmp = mkdtempSync("/tmp/aenv-cli-tmux-");

  before(async () => {
    server = await startServer();
    id = ((await server.api("POST", "/sandboxes", { templateID: "base", timeout: 300 })).body as { sandboxID: string })
      .sandboxID;
  });
  after(async () => {
    tmux("kill-session", "-t", session);
    if (id) await server?.api("DELETE", `/sandboxes/${id}`).catch(() => undefined);
    await server?.stop();
    if (server) cleanupDataDir(server);
    rmSync(tmp, { recursive: true, force: true });
  });

  test("connect: echo, resize, stty size, exit code", async () => {
    const rcFile = join(tmp, "rc");
    const cmd = `AENV_API_URL=${server.url} AENV_API_KEY=${server.apiKey} ${process.execPath} ${BIN} connect ${id}; echo $? > ${rcFile}; sleep 30`;
    assert.equal(tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd).status, 0);
    tmux("send-keys", "-t", session, "echo hi-$((40+2))", "Enter");
    await waitFor(/^hi-42\s*$/m, "echo output");
    tmux("send-keys", "-t", session, "stty size", "Enter");
    await waitFor(/^40 120\s*$/m, "initial size");
    assert.equal(tmux("resize-window", "-t", session, "-x", "100", "-y", "30").status, 0);
    // The new size reaches the sandbox's terminal a moment later: ask again until it shows.
    for (const until = Date.now() + 20_000; ; ) {
      tmux("send-keys", "-t", session, "clear; stty size", "Enter");
      try {
        await waitFor(/^30 100\s*$/m, "resized size", 2_000);
        break;
      } catch (e) {
        if (Date.now() > until) throw e;
      }
    }
    tmux("send-keys", "-t", session, "exit 3", "Enter");
    const deadline = Date.now() + 15_000;
    let rc = "";
    while (Date.now() < deadline) {
      try {
        rc = readFileSync(rcFile, "utf8").trim();
        if (rc) break;
      } catch {
        // not yet
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(rc, "3", pane());
  });
});
