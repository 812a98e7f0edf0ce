/** sudo/su option parsing and the environment commands get; file metadata in real xattrs. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { XattrMetadata } from "../src/filesystem/metadata.js";
import { XattrHelper, XattrHelperGone } from "../src/filesystem/xattr-helper.js";
import { parseSu, parseSudo } from "../src/sudo/options.js";
import { commandFor, decodeRequest } from "../src/sudo/server.js";

const root = { name: "root", uid: 0, gid: 0, home: "/root", shell: "/bin/bash" };
const caller = {
  env: { FOO: "bar", HOME: "/home/user", PATH: "/x", TERM: "xterm" },
  name: "user",
  uid: "1000",
  gid: "1000",
};

describe("sudo and su", () => {
  it("sudo: options, the command, and env_reset unless -E", () => {
    const r = parseSudo(["-n", "-E", "--", "id", "-u"], "user");
    assert.deepEqual(r, {
      kind: "run",
      user: "root",
      argv: ["id", "-u"],
      shell: false,
      login: false,
      preserveEnv: true,
    });
    const plain = parseSudo(["whoami"], "user");
    assert.ok(plain.kind === "run");
    const c = commandFor(plain, root, caller);
    assert.deepEqual([c.file, c.args], ["whoami", []]);
    assert.equal(c.env.FOO, undefined, "env reset");
    assert.equal(c.env.TERM, "xterm", "kept like env_keep");
    assert.equal(c.env.HOME, "/root");
    assert.equal(c.env.SUDO_USER, "user");
    assert.match(c.env.PATH as string, /\/usr\/sbin/);
    const e = parseSudo(["-E", "env"], "user");
    assert.ok(e.kind === "run");
    assert.equal(commandFor(e, root, caller).env.FOO, "bar", "-E keeps the environment");
    const u = parseSudo(["-u", "nobody", "-i", "pwd"], "user");
    assert.deepEqual(u, { kind: "run", user: "nobody", argv: ["pwd"], shell: true, login: true, preserveEnv: false });
    assert.ok(parseSudo(["-iu", "nobody"], "user").kind === "run");
    const sh = commandFor(parseSudo(["-s", "echo", "a"], "user") as never, root, caller);
    assert.deepEqual([sh.file, sh.args], ["/bin/bash", ["-c", "echo a"]]);
    assert.match((parseSudo(["-l"], "user") as { text: string }).text, /NOPASSWD: ALL/);
    assert.throws(() => parseSudo([], "user"), /usage/);
    assert.throws(() => parseSudo(["-Z", "x"], "user"), /invalid option/);
  });

  it("su: user, -c, login", () => {
    assert.deepEqual(parseSu(["-c", "whoami"]), {
      kind: "run",
      user: "root",
      argv: ["whoami"],
      shell: true,
      login: false,
      preserveEnv: true,
    });
    const l = parseSu(["-", "user", "-c", "pwd"]);
    assert.ok(l.kind === "run" && l.user === "user" && l.login && l.preserveEnv === false);
  });

  it("requests decode; malformed ones are refused", () => {
    const b = Buffer.from(["sudo", "/tmp", "2", "id", "-u", "A=1", "B=x=y", ""].join("\0"));
    assert.deepEqual(decodeRequest(b), { tool: "sudo", cwd: "/tmp", args: ["id", "-u"], env: { A: "1", B: "x=y" } });
    assert.throws(() => decodeRequest(Buffer.from(["rm", "/", "0", ""].join("\0"))), /malformed/);
    assert.throws(() => decodeRequest(Buffer.from(["sudo", "/", "9", "a", ""].join("\0"))), /malformed/);
  });
});

describe("file metadata in user.e2b.* xattrs", () => {
  const tool = fileURLToPath(new URL("../dist/aenv-xattr", import.meta.url));
  it("set through envd is an xattr; one set out of band is read back; it follows renames", async () => {
    const dir = mkdtempSync("/var/tmp/envd-xattr-");
    try {
      const m = new XattrMetadata(tool);
      const a = join(dir, "a.txt");
      const b = join(dir, "b.txt");
      writeFileSync(a, "x");
      writeFileSync(b, "y");
      await m.set(a, { owner: "alice", "k=v": "ünïcode" });
      // Out of band, as `setfattr`/`os.setxattr` would: through the helper's own set.
      execFileSync(tool, ["set", b, Buffer.from("tag").toString("hex"), Buffer.from("blue").toString("hex")]);
      const [ma, mb] = await m.getMany([
        { path: a, dev: 0, ino: 0 },
        { path: b, dev: 0, ino: 0 },
      ]);
      assert.deepEqual(ma, { owner: "alice", "k=v": "ünïcode" });
      assert.deepEqual(mb, { tag: "blue" });
      const c = join(dir, "c.txt");
      renameSync(a, c);
      assert.deepEqual((await m.getMany([{ path: c, dev: 0, ino: 0 }]))[0], { owner: "alice", "k=v": "ünïcode" });
      await m.set(c, {});
      assert.equal((await m.getMany([{ path: c, dev: 0, ino: 0 }]))[0], undefined, "cleared");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("one helper process answers many calls in order; errors come back; a dead helper is replaced", async () => {
    const dir = mkdtempSync("/var/tmp/envd-xattr-");
    const h = new XattrHelper(tool);
    try {
      const files = Array.from({ length: 40 }, (_, i) => join(dir, `f${i}`));
      for (const f of files) writeFileSync(f, "x");
      const hex = (t: string) => Buffer.from(t).toString("hex");
      // Concurrent calls: each answer must reach its own caller.
      await Promise.all(files.map((f, i) => h.call(["set", f, hex("n"), hex(String(i))])));
      const outs = await Promise.all(files.map((f) => h.call(["get", f])));
      for (const [i, o] of outs.entries()) assert.equal(o, `0\t${hex("n")}\t${hex(String(i))}\n`);
      await assert.rejects(h.call(["set", join(dir, "missing"), hex("a"), hex("b")]), /missing: No such file/);
      await assert.rejects(h.call(["bogus"]), /usage/);
      assert.equal(await h.call(["get", files[0] as string]), outs[0], "still serving after failed calls");
      h.close();
      await assert.rejects(h.call(["get", files[0] as string]), XattrHelperGone);
      // XattrMetadata starts a new helper when its own is gone.
      const m = new XattrMetadata(tool);
      m.close();
      const [meta] = await m.getMany([{ path: files[3] as string, dev: 0, ino: 0 }]);
      assert.deepEqual(meta, { n: "3" });
      m.close();
    } finally {
      h.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
