/**
 * Filesystem layers: envd's POST /fs-layer/capture and /fs-layer/apply. envd captures and
 * applies `/`, and stops every other process (kill -1) while it captures, so it runs here as a
 * sandbox's envd does: pid 1 of its own pid namespace, chrooted into a test tree, with /proc, a
 * tmpfs /tmp and a bind-mounted /etc/resolv.conf in its own mount namespace.
 *
 * Checked: what a capture holds (read with the tests' own tar reader, test/layer-tar.ts); a
 * second envd on the template tree applies it and gets the tree back; hostile layers; cut
 * layers; method and token checks.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { EnvdLayerStats } from "@aenv/protocol";
import { ENVD, needsRoot, TOKEN } from "./helpers.js";
import { END_OF_ARCHIVE, encodeHeader, type LayerHeader, readLayer } from "./layer-tar.js";

const ok = (cmd: string, args: string[]) => spawnSync(cmd, args, { stdio: "ignore" }).status === 0;
const skip =
  needsRoot ||
  (!existsSync(ENVD) && "envd is not built (no Go)") ||
  (!ok("unshare", ["--pid", "--fork", "--mount", "--propagation", "private", "true"]) &&
    "no pid and mount namespaces (unshare) here");

const tmp = mkdtempSync("/var/tmp/envd-native-layer-");

/**
 * Every path under dir with what a layer must keep of it (sockets and fifos are never kept);
 * files that share an inode name the group's first path.
 */
function describeTree(dir: string, keep: (p: string) => boolean = () => true): string[] {
  const rows: Array<{ line: string; path: string; ino?: number }> = [];
  const walk = (rel: string) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const p = rel ? `${rel}/${name}` : name;
      if (!keep(p)) continue;
      const st = lstatSync(join(dir, p));
      if (!st.isSymbolicLink() && !st.isFile() && !st.isDirectory()) continue;
      const what = st.isSymbolicLink()
        ? `-> ${readlinkSync(join(dir, p))}`
        : st.isFile()
          ? JSON.stringify(readFileSync(join(dir, p), "utf8").slice(0, 40))
          : "dir";
      rows.push({
        path: p,
        line: `${p} ${(st.mode & 0o7777).toString(8)} ${st.uid}:${st.gid} ${Math.floor(st.mtimeMs / 1000)} ${what}`,
        ...(st.isFile() ? { ino: st.ino } : {}),
      });
      if (st.isDirectory()) walk(p);
    }
  };
  walk("");
  const first = new Map<number, string>();
  const count = new Map<number, number>();
  for (const r of rows) {
    if (r.ino === undefined) continue;
    if (!first.has(r.ino)) first.set(r.ino, r.path);
    count.set(r.ino, (count.get(r.ino) ?? 0) + 1);
  }
  return rows.map((r) =>
    r.ino !== undefined && (count.get(r.ino) ?? 0) > 1 ? `${r.line} (linked to ${first.get(r.ino)})` : r.line,
  );
}

/** A chrooted native envd, pid 1 of its own pid namespace. */
interface Chrooted {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

async function startChrooted(root: string, setup: string[] = [], withLower = true): Promise<Chrooted> {
  mkdirSync(join(root, ".aenv", "etc"), { recursive: true });
  // Without a template tree at /.aenv/lower the native envd refuses layers (not a sandbox).
  if (withLower) mkdirSync(join(root, ".aenv", "lower"), { recursive: true });
  mkdirSync(join(root, "proc"), { recursive: true });
  writeFileSync(join(root, ".aenv/etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n");
  writeFileSync(join(root, ".aenv/etc/group"), "root:x:0:\n");
  copyFileSync(ENVD, join(root, ".aenv/envd"));
  chmodSync(join(root, ".aenv/envd"), 0o755);
  // A build with cgo (not build.mjs's) needs its loader and libc: copied beside it.
  let run = "/.aenv/envd";
  const ldd = spawnSync("ldd", [ENVD], { encoding: "utf8" });
  if (ldd.status === 0) {
    mkdirSync(join(root, ".aenv/lib"), { recursive: true });
    let loader = "";
    for (const m of ldd.stdout.matchAll(/(\/\S+) \(0x/g)) {
      const lib = m[1] as string;
      copyFileSync(lib, join(root, ".aenv/lib", basename(lib)));
      if (/\/ld-/.test(lib)) loader = basename(lib);
    }
    run = `/.aenv/lib/${loader} --library-path /.aenv/lib /.aenv/envd`;
  }
  const script = [
    'mount -t proc proc "$0/proc"',
    ...setup,
    `exec chroot "$0" ${run} --host 127.0.0.1 --port 0 --etc /.aenv/etc --access-token ${TOKEN}`,
  ].join(" && ");
  const child: ChildProcess = spawn(
    "unshare",
    ["--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "sh", "-c", script, root],
    { stdio: ["ignore", "inherit", "pipe"] },
  );
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const port = await new Promise<number>((resolve, reject) => {
    let seen = "";
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`chrooted envd exited with ${code}: ${seen}`)));
    child.stderr?.on("data", (d: Buffer) => {
      if (seen.length < 65536) seen += d.toString();
      const m = /listening on [^\s]*:(\d+)/.exec(seen);
      if (m?.[1]) resolve(Number(m[1]));
    });
  });
  child.stderr?.on("data", (d: Buffer) => process.stderr.write(d));
  const pid = Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, "utf8").trim());
  const stop = async () => {
    try {
      process.kill(pid, "SIGTERM");
    } catch {}
    await exited;
  };
  // Its capture signals every process it can see: only ever one alone in its namespace.
  const nspid = /^NSpid:\s+(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]?.split(/\s+/);
  if (nspid?.length !== 2 || nspid[1] !== "1") {
    await stop();
    throw new Error(`the chrooted envd is not pid 1 of its own namespace: ${nspid}`);
  }
  return { url: `http://127.0.0.1:${port}`, pid, stop };
}

async function post(url: string, body?: Buffer, token = TOKEN): Promise<{ status: number; body: Buffer }> {
  const res = await fetch(url, {
    method: "POST",
    headers: token ? { "x-access-token": token } : {},
    ...(body ? { body: new Uint8Array(body) } : {}),
  });
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
}

/** The entries of a layer, one line each (for a readable difference). */
async function entries(layer: Buffer): Promise<string[]> {
  const out: string[] = [];
  for await (const { header: h } of readLayer(
    (async function* () {
      yield layer;
    })(),
  ))
    out.push(JSON.stringify(h));
  return out;
}

/** A template tree and a sandbox's tree made from it, with every kind of change. */
async function makeTrees(lower: string, root: string): Promise<void> {
  mkdirSync(join(lower, "a"), { recursive: true });
  mkdirSync(join(lower, "b"));
  mkdirSync(join(lower, "sort"));
  mkdirSync(join(lower, "etc"));
  mkdirSync(join(lower, "tmp"));
  writeFileSync(join(lower, "a/keep.txt"), "old");
  writeFileSync(join(lower, "a/gone.txt"), "gone");
  writeFileSync(join(lower, "b/c.txt"), "c");
  writeFileSync(join(lower, "t"), "file that becomes a folder");
  writeFileSync(join(lower, "same.txt"), "same");
  writeFileSync(join(lower, "sort/old"), "deleted");
  writeFileSync(join(lower, "etc/resolv.conf"), "lower resolv");
  writeFileSync(join(lower, "tmp/lower-tmp.txt"), "hidden by the tmpfs");
  await new Promise((r) => setTimeout(r, 30));

  mkdirSync(join(root, "a"), { recursive: true });
  writeFileSync(join(root, "a/keep.txt"), "new contents");
  mkdirSync(join(root, "t"));
  writeFileSync(join(root, "t/inner.txt"), "inner");
  linkSync(join(lower, "same.txt"), join(root, "same.txt"));
  writeFileSync(join(root, "a", `${"long-name-".repeat(15)}ü ñ.txt`), "long");
  mkdirSync(join(root, "a", "deep-".repeat(30), "x"), { recursive: true });
  writeFileSync(join(root, "a", "deep-".repeat(30), "x/f"), "deep");
  symlinkSync("../t/inner.txt", join(root, "a/link"));
  symlinkSync("/etc/hostname", join(root, "a/abslink"));
  writeFileSync(join(root, "a/h1"), "hard");
  linkSync(join(root, "a/h1"), join(root, "a/h2"));
  writeFileSync(join(root, "a/suid"), "x");
  chownSync(join(root, "a/suid"), 1234, 5678);
  chmodSync(join(root, "a/suid"), 0o4755);
  writeFileSync(join(root, "a/big"), Buffer.alloc(3 << 20, 7));
  writeFileSync(join(root, "a/empty"), "");
  execFileSync("mkfifo", [join(root, "a/fifo")]);
  chmodSync(join(root, "t"), 0o700);
  utimesSync(join(root, "a/keep.txt"), 981173106, 981173106);
  // JavaScript sorts by UTF-16 units (U+1F600 before U+FF21); the first name of a hard-link
  // group is the one a link points to.
  mkdirSync(join(root, "sort"));
  for (const n of ["a", "B", "ä", "z", "😀"]) writeFileSync(join(root, "sort", n), n);
  linkSync(join(root, "sort/😀"), join(root, "sort/Ａ"));
  mkdirSync(join(root, "etc"));
  writeFileSync(join(root, "etc/resolv.conf"), "under the bind mount");
  writeFileSync(join(root, "etc/hostname"), "sbx");
  mkdirSync(join(root, "tmp"));
  utimesSync(join(root, "a"), 981173000, 981173000);
}

describe("envd: filesystem layers", { skip }, () => {
  const R = join(tmp, "sbx");
  const lower = join(R, ".aenv/lower");
  const R2 = join(tmp, "sbx2");
  let envd: Chrooted;
  let envd2: Chrooted;
  let layer: Buffer;

  before(async () => {
    mkdirSync(lower, { recursive: true });
    await makeTrees(lower, R);
    writeFileSync(join(R, ".aenv/resolv"), "bound");
    envd = await startChrooted(R, [
      'mount -t tmpfs tmpfs "$0/tmp"',
      'echo tmpfile > "$0/tmp/t.txt"',
      'mount --bind "$0/.aenv/resolv" "$0/etc/resolv.conf"',
    ]);
    // The second sandbox starts from the first one's template tree.
    execFileSync("cp", ["-a", lower, R2]);
    envd2 = await startChrooted(R2);
  });
  after(async () => {
    await Promise.all([envd?.stop(), envd2?.stop()]);
    rmSync(tmp, { recursive: true, force: true });
  });

  it("captures the changes against the template tree: tmpfs whole, mounts and envd's own folders skipped", async () => {
    const res = await post(`${envd.url}/fs-layer/capture`);
    assert.equal(res.status, 200);
    layer = res.body;
    assert.equal(layer.length % 512, 0);
    const g = await entries(layer);
    assert.ok(
      g.some((e) => e.includes('"tmp/t.txt"')),
      "the tmpfs /tmp is taken whole",
    );
    assert.ok(!g.some((e) => e.includes("resolv.conf")), "a mount point is skipped");
    assert.ok(!g.some((e) => /"(proc|\.aenv)/.test(e)), "/proc and /.aenv are skipped");
    assert.ok(!g.some((e) => e.includes("a/fifo")), "a fifo is never kept");
    // The first name of a hard-link group in UTF-16 order (as JavaScript sorts) is the one a link points to.
    assert.ok(g.some((e) => e.includes('"path":"sort/Ａ","type":"hardlink"') && e.includes('"linkname":"sort/😀"')));
    assert.ok(g.some((e) => e.includes('"path":"a/h2","type":"hardlink"') && e.includes('"linkname":"a/h1"')));
    assert.ok(!g.some((e) => e.includes('"path":"same.txt"')), "a file linked to its template copy is unchanged");
    const whiteouts = g.filter((e) => /"path":"([^"]*\/)?\.wh\./.test(e)).map((e) => JSON.parse(e).path);
    assert.deepEqual(whiteouts.sort(), ["a/.wh.gone.txt", ".wh.b", ".wh.t", "sort/.wh.old"].sort());
  });

  it("another envd on the template tree applies it and gets the tree back, with the same stats", async () => {
    const res = await post(`${envd2.url}/fs-layer/apply`, layer);
    assert.equal(res.status, 200, res.body.toString());
    const stats = JSON.parse(res.body.toString()) as EnvdLayerStats;
    assert.deepEqual(Object.keys(stats), ["entries", "whiteouts", "bytes"]);
    assert.equal(stats.whiteouts, 4);
    assert.equal(stats.entries, (await entries(layer)).length - 4);
    const keep = (p: string) => !/^(proc|\.aenv|tmp)(\/|$)/.test(p) && p !== "etc/resolv.conf";
    assert.deepEqual(describeTree(R2, keep), describeTree(R, keep));
    assert.equal(readFileSync(join(R2, "tmp/t.txt"), "utf8"), "tmpfile\n");
    assert.equal(readFileSync(join(R2, "etc/resolv.conf"), "utf8"), "lower resolv");
  });

  it("long link targets and big ids survive", async () => {
    symlinkSync(`${"x/".repeat(80)}target`, join(R, "a/longlink"));
    writeFileSync(join(R, "a/bigid"), "big");
    chownSync(join(R, "a/bigid"), 3000000, 3000001);
    const res = await post(`${envd.url}/fs-layer/capture`);
    assert.equal(res.status, 200);
    const applied = await post(`${envd2.url}/fs-layer/apply`, res.body);
    assert.equal(applied.status, 200, applied.body.toString());
    assert.equal(readlinkSync(join(R2, "a/longlink")), `${"x/".repeat(80)}target`);
    const st = lstatSync(join(R2, "a/bigid"));
    assert.deepEqual([st.uid, st.gid], [3000000, 3000001]);
  });

  it("never writes outside the root or into /proc and /.aenv", async () => {
    const h: LayerHeader = { path: "", type: "file", mode: 0o644, uid: 0, gid: 0, size: 0, mtime: 0, linkname: "" };
    const hostile = Buffer.concat([
      encodeHeader({ ...h, path: "../escaped" }),
      encodeHeader({ ...h, path: "proc/x" }),
      encodeHeader({ ...h, path: ".aenv/x" }),
      encodeHeader({ ...h, path: ".wh..aenv" }),
      encodeHeader({ ...h, path: "ok" }),
      encodeHeader({ ...h, path: "up", type: "symlink", linkname: "../../.." }),
      encodeHeader({ ...h, path: "up/.aenv/y" }),
      encodeHeader({ ...h, path: "up/.aenv/.wh.envd" }),
      END_OF_ARCHIVE,
    ]);
    const res = await post(`${envd2.url}/fs-layer/apply`, hostile);
    assert.equal(res.status, 200, res.body.toString());
    assert.deepEqual(JSON.parse(res.body.toString()), { entries: 2, whiteouts: 2, bytes: 0 });
    assert.ok(existsSync(join(R2, "ok")));
    assert.ok(existsSync(join(R2, ".aenv/envd")));
    for (const p of [join(R2, ".aenv/x"), join(R2, ".aenv/y"), join(dirname(R2), "escaped"), "/escaped"])
      assert.ok(!existsSync(p), p);
  });

  it("refuses a cut or foreign layer", async () => {
    const big = Buffer.concat([
      encodeHeader({ path: "f", type: "file", mode: 0o644, uid: 0, gid: 0, size: 5000, mtime: 0, linkname: "" }),
      Buffer.alloc(5120, 1),
      END_OF_ARCHIVE,
    ]);
    const gnu = Buffer.alloc(512);
    gnu.write("././@LongLink", 0);
    gnu.write("L", 156);
    for (const [cut, message] of [
      [big.subarray(0, 2048), "layer ends in the middle of a file"],
      [big.subarray(0, 300), "layer ends in the middle of a record"],
      [big.subarray(0, 512 + 5120), "layer ends without an end-of-archive marker"],
      [gnu, "layer entry of unsupported type 'L'"],
    ] as const) {
      const res = await post(`${envd2.url}/fs-layer/apply`, cut);
      assert.equal(res.status, 500);
      assert.deepEqual(JSON.parse(res.body.toString()), { code: 500, message });
    }
  });

  it("refuses layers where no template tree is bound (not a sandbox): stops and writes nothing", async () => {
    const R3 = join(tmp, "no-lower");
    mkdirSync(R3);
    const bare = await startChrooted(R3, [], false);
    try {
      for (const p of ["/fs-layer/capture", "/fs-layer/apply"]) {
        const res = await post(`${bare.url}${p}`, p.endsWith("apply") ? END_OF_ARCHIVE : undefined);
        assert.equal(res.status, 501);
        assert.match(JSON.parse(res.body.toString()).message, /no template tree at \/\.aenv\/lower/);
      }
    } finally {
      await bare.stop();
    }
  });

  it("checks the method, then the token", async () => {
    for (const p of ["/fs-layer/capture", "/fs-layer/apply"]) {
      assert.equal((await fetch(`${envd2.url}${p}`)).status, 405);
      assert.equal((await post(`${envd2.url}${p}`, undefined, "wrong")).status, 401);
    }
  });
});
