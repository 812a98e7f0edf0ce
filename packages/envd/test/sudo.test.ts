/**
 * `sudo` and `su` end to end: the real client (dist/aenv-sudo) against envd's root service,
 * the built envd. envd serves sudo only "in a
 * sandbox" (its parent is PID 1 and /.aenv/bin/aenv-sudo exists) and the client's socket path
 * is fixed (/run/aenv/sudo.sock), so envd runs here as a sandbox would see it: in its own PID
 * and mount namespaces (unshare), chrooted into a root made of the host's directories with a
 * private /run, /usr/local/bin and /.aenv, the child of that namespace's PID 1 (the script
 * below, which also runs the commands the tests send it). The accounts are startHarness's.
 */
import assert from "node:assert/strict";
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ENVD, needsRoot } from "./helpers.js";

const PKG = path.resolve(import.meta.dirname, "..");
const CLIENT = path.join(PKG, "dist", "aenv-sudo");

const hasUnshare = spawnSync("unshare", ["--mount", "--pid", "--fork", "true"]).status === 0;
const skip =
  needsRoot ||
  (!hasUnshare && "unshare (mount and PID namespaces) is not available") ||
  (!existsSync(CLIENT) && "dist/aenv-sudo is not built");

/**
 * PID 1 of the namespace: builds the root, starts envd (its child), then runs one command per
 * line of stdin — `<root|user> <base64 command> <base64 stdin>` — and answers
 * `RESULT <exit status> <base64 stdout> <base64 stderr>` (`-` for empty).
 */
const NS_SCRIPT = String.raw`
set -e
FIX=$1; CLIENT=$2; shift 2
NR=$FIX/newroot
mkdir -p $NR
mount -t tmpfs tmpfs $NR
for l in bin sbin lib lib32 lib64; do if [ -L /$l ]; then ln -s "$(readlink /$l)" $NR/$l; fi; done
for d in usr etc dev sys tmp var home root $BIND_TOPS; do
  if [ -d /$d ] && [ ! -L /$d ] && [ ! -e $NR/$d ]; then mkdir $NR/$d; mount --rbind /$d $NR/$d; fi
done
mkdir $NR/proc $NR/run
mount -t proc proc $NR/proc
mount -t tmpfs tmpfs $NR/run
mount -t tmpfs tmpfs $NR/usr/local/bin
# node itself may live there (a node installed by hand): keep it visible
case $NODE_BIN in /usr/local/bin/*) touch $NR$NODE_BIN; mount --bind $NODE_BIN $NR$NODE_BIN ;; esac
mkdir -p $NR/.aenv/bin
cp $CLIENT $NR/.aenv/bin/aenv-sudo
# envd in the package's directory (for tsx), a child of this PID 1 (sh execs it)
chroot $NR sh -c 'cd "$0" && exec "$@"' "$PKG_DIR" "$@" 2>$FIX/envd.log &
ENVD=$!
trap 'kill $ENVD 2>/dev/null; wait $ENVD 2>/dev/null' EXIT
i=0
until [ -S $NR/run/aenv/sudo.sock ]; do
  i=$((i + 1)); if [ $i -gt 600 ]; then echo "FAILED envd did not serve sudo: $(tr '\n' ' ' <$FIX/envd.log)"; exit 1; fi
  sleep 0.05
done
echo READY
set +e
while read -r who cmd in; do
  [ "$cmd" = - ] && cmd=; [ "$in" = - ] && in=
  printf %s "$cmd" | base64 -d >$FIX/cmd
  printf %s "$in" | base64 -d >$FIX/in
  if [ "$who" = root ]; then
    chroot $NR env -i USER=root LOGNAME=root HOME=$FIX/root PATH=/usr/local/bin:/usr/bin:/bin \
      timeout 30 sh -c "cd $FIX/root && . $FIX/cmd" <$FIX/in >$FIX/out 2>$FIX/err
  else
    chroot --userspec=1000:1000 --groups=1000 $NR env -i USER=user LOGNAME=user HOME=$FIX/home/user \
      TERM=xterm PATH=/usr/local/bin:/usr/bin:/bin timeout 30 sh -c "cd $FIX/home/user && . $FIX/cmd" \
      <$FIX/in >$FIX/out 2>$FIX/err
  fi
  code=$?
  out=$(base64 -w0 <$FIX/out); err=$(base64 -w0 <$FIX/err)
  [ -n "$out" ] || out=-
  [ -n "$err" ] || err=-
  echo "RESULT $code $out $err"
done
`;

/**
 * The top-level directories the chroot must also show: the checkout's (CI clones anywhere, not
 * only under /work), node's and the fixture's.
 */
function topDirs(...paths: string[]): Set<string> {
  return new Set(paths.map((p) => path.resolve(p).split(path.sep)[1] ?? "").filter((d) => /^[\w.-]+$/.test(d)));
}

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

class Sandboxed {
  private buf = "";
  private waiters: Array<{ resolve: (line: string) => void; reject: (err: Error) => void }> = [];
  private queue = Promise.resolve() as Promise<unknown>;
  private exited: Error | undefined;

  constructor(private readonly child: ChildProcessWithoutNullStreams) {
    child.once("exit", (code) => {
      this.exited = new Error(`the namespace exited (${code})`);
      for (const w of this.waiters.splice(0)) w.reject(this.exited);
    });
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (d: string) => {
      this.buf += d;
      for (let nl = this.buf.indexOf("\n"); nl >= 0; nl = this.buf.indexOf("\n")) {
        const line = this.buf.slice(0, nl);
        this.buf = this.buf.slice(nl + 1);
        this.waiters.shift()?.resolve(line);
      }
    });
  }

  line(): Promise<string> {
    if (this.exited) return Promise.reject(this.exited);
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** Runs `cmd` with sh in the sandboxed root, as `user` (uid 1000) in its home or as root. */
  run(cmd: string, opts: { as?: "user" | "root"; stdin?: string } = {}): Promise<Result> {
    const b64 = (s: string) => Buffer.from(s).toString("base64") || "-";
    const next = this.queue.then(async () => {
      const answer = this.line();
      this.child.stdin.write(`${opts.as ?? "user"} ${b64(cmd)} ${b64(opts.stdin ?? "")}\n`);
      const m = /^RESULT (\d+) (\S+) (\S+)$/.exec(await answer);
      assert.ok(m, "an answer");
      const text = (s: string) => (s === "-" ? "" : Buffer.from(s, "base64").toString());
      return { code: Number(m[1]), stdout: text(m[2] as string), stderr: text(m[3] as string) };
    });
    this.queue = next.catch(() => undefined);
    return next;
  }
}

describe("sudo and su through envd's root service", { skip }, () => {
  let fix: string;
  let home: string;
  let rootHome: string;
  let nobodyHome: string;
  let child: ChildProcessWithoutNullStreams;
  let sb: Sandboxed;

  before(async () => {
    // startHarness's accounts: root, nobody and user (1000), homes under a temp dir
    fix = mkdtempSync(path.join(os.tmpdir(), "envd-sudo-"));
    chmodSync(fix, 0o755);
    const etc = path.join(fix, "etc");
    home = path.join(fix, "home", "user");
    rootHome = path.join(fix, "root");
    nobodyHome = path.join(fix, "nobody");
    for (const d of [etc, home, rootHome, nobodyHome]) mkdirSync(d, { recursive: true, mode: 0o755 });
    chmodSync(rootHome, 0o700);
    chownSync(home, 1000, 1000);
    chownSync(nobodyHome, 65534, 65534);
    writeFileSync(
      path.join(etc, "passwd"),
      [
        `root:x:0:0:root:${rootHome}:/bin/bash`,
        `nobody:x:65534:65534:nobody:${nobodyHome}:/usr/sbin/nologin`,
        `user:x:1000:1000::${home}:/bin/bash`,
        "",
      ].join("\n"),
    );
    writeFileSync(path.join(etc, "group"), ["root:x:0:", "nogroup:x:65534:", "user:x:1000:", ""].join("\n"));
    const script = path.join(fix, "ns.sh");
    writeFileSync(script, NS_SCRIPT);
    const envd = [ENVD, "--host", "127.0.0.1", "--port", "0", "--etc", etc];
    child = spawn(
      "unshare",
      ["--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "sh", script, fix, CLIENT, ...envd],
      {
        env: {
          ...process.env,
          PKG_DIR: PKG,
          NODE_BIN: process.execPath,
          BIND_TOPS: [...topDirs(PKG, process.execPath, fix)].join(" "),
        },
      },
    );
    child.stderr.on("data", (d: Buffer) => process.stderr.write(d));
    sb = new Sandboxed(child);
    const ready = await sb.line();
    assert.equal(ready, "READY");
  });

  after(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child.once("exit", r));
      child.stdin.end();
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(t);
    }
    if (fix) rmSync(fix, { recursive: true, force: true });
  });

  it("installs sudo and su in /usr/local/bin; the socket is for every account", async () => {
    const r = await sb.run("readlink /usr/local/bin/sudo /usr/local/bin/su; stat -c %a /run/aenv/sudo.sock");
    assert.equal(r.stdout, "/.aenv/bin/aenv-sudo\n/.aenv/bin/aenv-sudo\n666\n");
  });

  it("sudo runs as root without a password; -E keeps the environment; su works", async () => {
    assert.equal((await sb.run("id -u")).stdout, "1000\n");
    assert.equal((await sb.run("sudo whoami")).stdout, "root\n");
    assert.equal((await sb.run("sudo -n id -u")).stdout, "0\n");
    assert.equal((await sb.run("sudo -n -E -- id -u")).stdout, "0\n");
    assert.equal((await sb.run("FOO=bar sudo -E sh -c 'echo $FOO'")).stdout, "bar\n");
    assert.equal((await sb.run("FOO=bar sudo sh -c 'echo [$FOO] $HOME'")).stdout, `[] ${rootHome}\n`);
    const only = path.join(rootHome, "only-root");
    assert.equal((await sb.run(`echo secret | sudo tee ${only} >/dev/null && sudo cat ${only}`)).stdout, "secret\n");
    assert.notEqual((await sb.run(`cat ${only}`)).code, 0, "the user itself is still not root");
    assert.equal((await sb.run("sudo sh -c 'exit 7'")).code, 7, "the command's exit status");
    assert.equal((await sb.run("su -c whoami")).stdout, "root\n");
    assert.equal((await sb.run("sudo su - user -c pwd")).stdout, `${home}\n`);
  });

  it("the environment: env_reset keeps TERM, sets HOME, PATH and SUDO_*; -E keeps the rest", async () => {
    const env = (s: string) =>
      Object.fromEntries(
        s
          .trim()
          .split("\n")
          .map((l) => [l.split("=")[0], l.slice(l.indexOf("=") + 1)]),
      );
    const plain = env((await sb.run("FOO=bar sudo env")).stdout);
    assert.equal(plain.FOO, undefined, "env reset");
    assert.equal(plain.TERM, "xterm", "kept like env_keep");
    assert.equal(plain.HOME, rootHome);
    assert.equal(plain.USER, "root");
    assert.equal(plain.SUDO_USER, "user");
    assert.equal(plain.SUDO_UID, "1000");
    assert.equal(plain.SUDO_COMMAND, "env");
    assert.match(plain.PATH as string, /\/usr\/sbin/);
    const e = env((await sb.run("FOO=bar sudo -E env")).stdout);
    assert.equal(e.FOO, "bar", "-E keeps the environment");
    assert.equal(e.HOME, home, "and HOME");
    const list = env((await sb.run("FOO=1 BAR=2 sudo --preserve-env=FOO env")).stdout);
    assert.deepEqual([list.FOO, list.BAR], ["1", undefined]);
    const su = env((await sb.run("FOO=bar su -c env")).stdout);
    assert.deepEqual([su.FOO, su.HOME, su.USER], ["bar", home, "root"], "su without - keeps the environment");
  });

  it("users, shells and working directories", async () => {
    assert.equal((await sb.run("sudo -u nobody id -u")).stdout, "65534\n");
    assert.equal((await sb.run("sudo -u nobody -i pwd")).code, 1, "nobody's shell is nologin");
    assert.equal((await sb.run("sudo -i pwd")).stdout, `${rootHome}\n`, "a login shell starts in the home");
    assert.equal((await sb.run("cd /tmp && sudo pwd")).stdout, "/tmp\n", "else in the caller's directory");
    assert.equal((await sb.run("sudo -iu user", { stdin: "pwd\n" })).stdout, `${home}\n`);
    assert.equal((await sb.run("sudo -s echo a")).stdout, "a\n");
    // The caller's directory is entered as root, then the command runs as the target user.
    const r = await sb.run("sudo -u nobody pwd; sudo -u nobody ls >/dev/null", { as: "root" });
    assert.equal(r.stdout, `${rootHome}\n`);
    assert.match(r.stderr, /Permission denied/);
    assert.equal((await sb.run("su - user -c pwd", { as: "root" })).stdout, `${home}\n`);
    assert.equal((await sb.run("su -s /bin/sh -c 'echo $SHELL' user")).stdout, "/bin/sh\n");
  });

  it("answers -l, -V, -v and -k itself; refuses bad usage and unknown users", async () => {
    assert.match((await sb.run("sudo -l")).stdout, /^User user may run .*\n {4}\(ALL : ALL\) NOPASSWD: ALL\n$/);
    assert.match((await sb.run("sudo -V")).stdout, /^Sudo version/);
    assert.deepEqual(await sb.run("sudo -v"), { code: 0, stdout: "", stderr: "" });
    assert.deepEqual(await sb.run("sudo -k"), { code: 0, stdout: "", stderr: "" });
    const none = await sb.run("sudo");
    assert.equal(none.code, 1);
    assert.match(none.stderr, /^sudo: usage: sudo/);
    const bad = await sb.run("sudo -Z x");
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /^sudo: invalid option -- 'Z'\nusage:/);
    assert.deepEqual(await sb.run("sudo -u"), {
      code: 1,
      stdout: "",
      stderr: "sudo: option requires an argument -- 'u'\n",
    });
    assert.deepEqual(await sb.run("su -x"), { code: 1, stdout: "", stderr: "su: invalid option -- 'x'\n" });
    assert.deepEqual(await sb.run("sudo -u ghost id"), { code: 1, stdout: "", stderr: "sudo: unknown user ghost\n" });
    assert.deepEqual(await sb.run("su ghost"), { code: 1, stdout: "", stderr: "su: user ghost does not exist\n" });
    assert.deepEqual(await sb.run("sudo nosuchcmd"), {
      code: 127,
      stdout: "",
      stderr: "sudo: nosuchcmd: command not found\n",
    });
    assert.deepEqual(await sb.run(`sudo ${home}`), {
      code: 1,
      stdout: "",
      stderr: `sudo: ${home}: spawn ${home} EACCES\n`,
    });
  });

  it("relays stdin and large output; signals reach the command; a client gone hangs it up", async () => {
    assert.equal((await sb.run("head -c 3000000 /dev/zero | sudo cat | wc -c")).stdout, "3000000\n");
    assert.equal((await sb.run("sudo head -c 5000000 /dev/zero | wc -c")).stdout, "5000000\n");
    assert.equal((await sb.run("sudo sh -c 'cat; echo done >&2'", { stdin: "in\n" })).stdout, "in\n");
    assert.equal((await sb.run("sudo sh -c 'kill -TERM $$'")).code, 143, "128 + the signal");
    const int = await sb.run("sudo sleep 20 & P=$!; sleep 0.5; kill -INT $P; wait $P; echo $?");
    assert.equal(int.stdout, "130\n", "Ctrl-C stops the command");
    const flag = path.join(os.tmpdir(), `envd-sudo-hup-${process.pid}`);
    rmSync(flag, { force: true });
    await sb.run(
      `sudo sh -c 'trap "echo hup >${flag}; exit 0" HUP; sleep 20 & wait' & P=$!; sleep 0.5; kill -9 $P; sleep 0.5`,
    );
    assert.equal((await sb.run(`cat ${flag}`)).stdout, "hup\n");
    rmSync(flag, { force: true });
  });
});
