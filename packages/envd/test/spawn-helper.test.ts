/** Commands start through aenv-init's spawn service (vfork + exec); without it, or after it died, through Node's spawn. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { CommandExitError, type Sandbox } from "e2b";
import { type Harness, needsRoot, startHarness, TOKEN } from "./helpers.js";

const parentCmdline = 'tr "\\0" " " < /proc/$PPID/cmdline';

/** process.Process/Start over Connect's streaming JSON protocol; the whole answer as text. */
async function rawStart(envdUrl: string, cmd: string, args: string[] = []): Promise<string> {
  const json = Buffer.from(JSON.stringify({ process: { cmd, args } }));
  const body = Buffer.alloc(5 + json.length);
  body.writeUInt32BE(json.length, 1);
  json.copy(body, 5);
  const r = await fetch(`${envdUrl}/process.Process/Start`, {
    method: "POST",
    headers: { "content-type": "application/connect+json", "x-access-token": TOKEN, "connect-protocol-version": "1" },
    body,
  });
  return Buffer.from(await r.arrayBuffer()).toString("latin1");
}

describe("spawn helper", { skip: needsRoot }, () => {
  let h: Harness;
  let sbx: Sandbox;

  before(async () => {
    h = await startHarness();
    sbx = await h.connect();
  });
  after(async () => {
    await h?.close();
  });

  it("starts commands: the helper is their parent, each leads its own session, users lose envd's groups", async () => {
    const r = await sbx.commands.run(`${parentCmdline}; echo; read -a s < /proc/$$/stat; echo "\${s[5]} $$"; id -G`);
    const [parent, session, groups] = r.stdout.split("\n");
    assert.match(parent as string, /aenv-init --spawner/);
    const [sid, pid] = (session as string).split(" ");
    assert.equal(sid, pid, "the command leads its own session (signals reach its group)");
    assert.equal(groups, "1000");
    const asRoot = await sbx.commands.run("id -u; echo $HOME", { user: "root" });
    assert.equal(asRoot.stdout, `0\n${h.rootHome}\n`);
  });

  it("exit codes, signals, stdin and output stay as with Node's spawn", async () => {
    await assert.rejects(sbx.commands.run("kill -9 $$"), (e: unknown) => {
      assert.ok(e instanceof CommandExitError);
      assert.equal(e.error, "signal: killed");
      return true;
    });
    await assert.rejects(sbx.commands.run("exit 7"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 7);
    const bg = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(bg.pid, "through stdin\n");
    await sbx.commands.closeStdin(bg.pid);
    const done = await bg.wait();
    assert.equal(done.stdout, "through stdin\n");
    const big = await sbx.commands.run("head -c 3000000 /dev/zero | tr '\\0' a");
    assert.equal(big.stdout.length, 3_000_000);
  });

  it("many quick commands at once all end (an exit may be reported before the streams are accepted)", async () => {
    const deadline = AbortSignal.timeout(20_000);
    const runs = Array.from({ length: 150 }, (_, i) =>
      sbx.commands.run(`echo ${i}`, { timeoutMs: 20_000, requestTimeoutMs: 20_000 }),
    );
    const all = await Promise.race([
      Promise.all(runs),
      new Promise<never>((_, rej) => deadline.addEventListener("abort", () => rej(new Error("commands hung")))),
    ]);
    assert.deepEqual(
      all.map((r) => r.stdout),
      all.map((_, i) => `${i}\n`),
    );
  });

  it("a program that does not exist is a clear error, by path and by PATH lookup", async () => {
    assert.match(await rawStart(h.envdUrl, "/no/such/program"), /error starting process '\/no\/such\/program'.*ENOENT/);
    // As libuv's lookup: EACCES when some PATH entry refused the search (user 1000 here), else ENOENT.
    assert.match(await rawStart(h.envdUrl, "no-such-program-xyz"), /spawn no-such-program-xyz (ENOENT|EACCES)/);
    assert.match(await rawStart(h.envdUrl, "true"), /"end"/, "PATH lookup finds true");
  });

  it("commands keep running when the helper dies: later ones start through Node", async () => {
    const r = await sbx.commands.run("echo $PPID");
    const helperPid = Number(r.stdout.trim());
    assert.match(readFileSync(`/proc/${helperPid}/cmdline`, "latin1"), /aenv-init/);
    process.kill(helperPid, "SIGKILL");
    await new Promise((res) => setTimeout(res, 200));
    const after_ = await sbx.commands.run(`${parentCmdline}`);
    assert.doesNotMatch(after_.stdout, /aenv-init/);
    assert.equal((await sbx.commands.run("echo still")).stdout, "still\n");
  });
});

describe("without the spawn helper", { skip: needsRoot }, () => {
  let h: Harness;
  after(async () => {
    await h?.close();
  });

  it("commands start through Node's spawn", async () => {
    h = await startHarness({ spawnHelper: false });
    const sbx = await h.connect();
    const r = await sbx.commands.run(parentCmdline);
    assert.doesNotMatch(r.stdout, /aenv-init/);
    assert.match(await rawStart(h.envdUrl, "/no/such/program"), /ENOENT/);
  });
});
