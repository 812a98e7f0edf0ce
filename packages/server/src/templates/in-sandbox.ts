/**
 * Small programs that build steps run inside the build sandbox with the node binary that
 * /.aenv already provides. Paths are then resolved by the sandbox's own kernel (gVisor), so a
 * symlink in an image can never point a COPY or an account change outside the rootfs, and no
 * tool (cp, useradd) has to exist in the image.
 */
import type { ProcessSpec } from "../orchestrator/envd-process.js";

const NODE = ["--library-path", "/.aenv/lib", "/.aenv/bin/node", "-e"];

function nodeProcess(script: string, args: string[]): ProcessSpec {
  return { cmd: "/.aenv/lib/ld-linux-x86-64.so.2", args: [...NODE, script, ...args], user: "root" };
}

// argv: staged source root, src (relative, may be a simple glob), dest, owner ("" = root), mode ("" = keep)
const COPY = String.raw`
const fs = require("fs"), path = require("path");
const [root, src, dest, owner, mode] = process.argv.slice(1);
function account(name) {
  if (!name) return { uid: 0, gid: 0 };
  if (/^\d+$/.test(name)) return { uid: +name, gid: +name };
  for (const l of fs.readFileSync("/etc/passwd", "utf8").split("\n")) {
    const f = l.split(":");
    if (f[0] === name) return { uid: +f[2], gid: +f[3] };
  }
  throw new Error("COPY: no such user '" + name + "'");
}
const who = account(owner);
const glob = /[*?[]/.test(src);
let matches;
if (glob) {
  const dir = path.posix.dirname(src), base = path.posix.basename(src);
  const re = new RegExp("^" + base.replace(/[.+^\${}()|\\]/g, "\\$&").replace(/\*/g, "[^/]*").replace(/\?/g, "[^/]") + "$");
  let names = [];
  try { names = fs.readdirSync(path.join(root, dir)); } catch {}
  matches = names.filter((n) => re.test(n)).map((n) => path.join(root, dir, n));
} else {
  matches = [path.join(root, path.posix.normalize(src))];
}
if (!matches.length || !matches.every((m) => fs.existsSync(m))) throw new Error("COPY: '" + src + "' matched no files in the uploaded context");
const intoDir = glob || matches.length > 1 || dest.endsWith("/") || (fs.existsSync(dest) && fs.statSync(dest).isDirectory());
const copied = [];
function walk(p) {
  copied.push(p);
  if (fs.lstatSync(p).isDirectory()) for (const n of fs.readdirSync(p)) walk(path.join(p, n));
}
for (const m of matches) {
  const isDir = fs.lstatSync(m).isDirectory();
  const target = isDir ? dest : intoDir ? path.join(dest, path.basename(m)) : dest;
  fs.mkdirSync(isDir ? target : path.dirname(target), { recursive: true });
  fs.cpSync(m, target, { recursive: true, force: true, verbatimSymlinks: true });
  if (isDir) { copied.push(target); for (const n of fs.readdirSync(m)) walk(path.join(target, n)); } else walk(target);
}
for (const p of copied) {
  fs.lchownSync(p, who.uid, who.gid);
  if (mode && !fs.lstatSync(p).isSymbolicLink()) fs.chmodSync(p, parseInt(mode, 8));
}
console.log("copied " + copied.length + " entries to " + dest);
`;

// argv: user name. Creates the account (and its home) when the image lacks it.
const ENSURE_USER = String.raw`
const fs = require("fs");
const name = process.argv[1];
const read = (f) => { try { return fs.readFileSync(f, "utf8"); } catch { return ""; } };
const passwd = read("/etc/passwd");
const lines = passwd.split("\n").filter(Boolean);
if (!lines.some((l) => l.split(":")[0] === name)) {
  let uid = 1000;
  const used = new Set(lines.map((l) => +l.split(":")[2]));
  while (used.has(uid)) uid++;
  const shell = fs.existsSync("/bin/bash") ? "/bin/bash" : "/bin/sh";
  const home = "/home/" + name;
  fs.mkdirSync("/etc", { recursive: true });
  fs.writeFileSync("/etc/passwd", lines.concat(name + ":x:" + uid + ":" + uid + "::" + home + ":" + shell).join("\n") + "\n");
  const groups = read("/etc/group").split("\n").filter(Boolean);
  if (!groups.some((l) => l.split(":")[0] === name)) fs.writeFileSync("/etc/group", groups.concat(name + ":x:" + uid + ":").join("\n") + "\n");
  fs.mkdirSync(home, { recursive: true });
  fs.chownSync(home, uid, uid);
  console.log("created user " + name + " (uid " + uid + ")");
}
`;

// argv: directory. WORKDIR creates it like Docker does.
const MKDIR = `require("fs").mkdirSync(process.argv[1], { recursive: true });`;

export const inSandbox = {
  exists: (path: string) => nodeProcess(`process.exit(require("fs").existsSync(process.argv[1]) ? 0 : 1)`, [path]),
  copy: (root: string, src: string, dest: string, owner: string, mode: string) =>
    nodeProcess(COPY, [root, src, dest, owner, mode]),
  ensureUser: (name: string) => nodeProcess(ENSURE_USER, [name]),
  mkdir: (dir: string) => nodeProcess(MKDIR, [dir]),
};
