/**
 * Filesystem layers on plain host folders: a layer taken of a tree against a base, applied to
 * a copy of the base, gives the tree back (contents, deletions, type changes, modes, owners,
 * mtimes, links, long names). Runs as root (owners are set).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
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
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { applyLayer } from "../src/fslayer/apply.js";
import { captureLayer, parseMounts } from "../src/fslayer/capture.js";

const tmp = mkdtempSync("/var/tmp/envd-layer-");
after(() => rmSync(tmp, { recursive: true, force: true }));

/** Every path under dir with what a layer must keep of it. */
function describeTree(dir: string, rel = ""): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(dir, rel)).sort()) {
    const p = rel ? `${rel}/${name}` : name;
    const st = lstatSync(join(dir, p));
    const what = st.isSymbolicLink()
      ? `-> ${readlinkSync(join(dir, p))}`
      : st.isFile()
        ? readFileSync(join(dir, p), "utf8")
        : "dir";
    out.push(`${p} ${(st.mode & 0o7777).toString(8)} ${st.uid}:${st.gid} ${Math.floor(st.mtimeMs / 1000)} ${what}`);
    if (st.isDirectory()) out.push(...describeTree(dir, p));
  }
  return out;
}

async function collect(gen: Iterable<Buffer> | AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const b of gen) parts.push(b);
  return Buffer.concat(parts);
}

describe("filesystem layers", () => {
  it("capture against a base, apply to a copy of it: the tree comes back", async () => {
    const lower = join(tmp, "lower");
    const root = join(tmp, "root");
    mkdirSync(join(lower, "a"), { recursive: true });
    mkdirSync(join(lower, "b"));
    writeFileSync(join(lower, "a/keep.txt"), "old");
    writeFileSync(join(lower, "a/gone.txt"), "gone");
    writeFileSync(join(lower, "b/c.txt"), "c");
    writeFileSync(join(lower, "t"), "file that becomes a folder");
    writeFileSync(join(lower, "same.txt"), "same");
    // File times tick coarsely (a few ms): the tree below must not share the base's.
    await new Promise((r) => setTimeout(r, 30));

    mkdirSync(join(root, "a"), { recursive: true });
    writeFileSync(join(root, "a/keep.txt"), "new contents");
    mkdirSync(join(root, "t"));
    writeFileSync(join(root, "t/inner.txt"), "inner");
    // The same inode as the base's: same ctime, so unchanged and left out of the layer.
    linkSync(join(lower, "same.txt"), join(root, "same.txt"));
    const long = `${"long-name-".repeat(15)}ü ñ.txt`;
    writeFileSync(join(root, "a", long), "long");
    symlinkSync("../t/inner.txt", join(root, "a/link"));
    // A short name whose target needs a pax record: the entry keeps its name.
    symlinkSync(`../${"deep-dir/".repeat(14)}target`, join(root, "a/far"));
    writeFileSync(join(root, "a/h1"), "hard");
    linkSync(join(root, "a/h1"), join(root, "a/h2"));
    writeFileSync(join(root, "a/suid"), "x");
    chownSync(join(root, "a/suid"), 1234, 5678);
    chmodSync(join(root, "a/suid"), 0o4755);
    chmodSync(join(root, "t"), 0o700);
    utimesSync(join(root, "a/keep.txt"), 981173106, 981173106);

    const stats = { entries: 0, whiteouts: 0, bytes: 0 };
    const layer = await collect(captureLayer({ root, lower, mountinfo: "" }, stats));
    assert.equal(layer.length % 512, 0);
    assert.ok(!layer.includes(Buffer.from("same.txt")), "an unchanged file is not in the layer");
    // a/gone.txt and b deleted, t replaced by a folder.
    assert.equal(stats.whiteouts, 3);

    const target = join(tmp, "target");
    execFileSync("cp", ["-a", lower, target]);
    const applied = await applyLayer(
      (async function* () {
        // Small pieces: record boundaries must not matter.
        for (let i = 0; i < layer.length; i += 700) yield layer.subarray(i, i + 700);
      })(),
      target,
    );
    assert.equal(applied.whiteouts, 3);
    assert.deepEqual(describeTree(target), describeTree(root));
    assert.equal(lstatSync(join(target, "a/h1")).ino, lstatSync(join(target, "a/h2")).ino, "hard link kept");
  });

  it("a layer cut short is refused", async () => {
    const root = join(tmp, "cut-root");
    mkdirSync(root);
    writeFileSync(join(root, "f"), "x".repeat(5000));
    const layer = await collect(
      captureLayer({ root, lower: join(tmp, "none"), mountinfo: "" }, { entries: 0, whiteouts: 0, bytes: 0 }),
    );
    const target = join(tmp, "cut-target");
    mkdirSync(target);
    await assert.rejects(
      applyLayer(
        (async function* () {
          yield layer.subarray(0, 2048);
        })(),
        target,
      ),
    );
  });

  it("paths that leave the root or reach envd's own mounts are never written", async () => {
    const { encodeHeader, END_OF_ARCHIVE } = await import("../src/fslayer/tar.js");
    const h = { type: "file" as const, mode: 0o644, uid: 0, gid: 0, size: 0, mtime: 0, linkname: "" };
    const target = join(tmp, "hostile");
    mkdirSync(target);
    const layer = Buffer.concat([
      encodeHeader({ ...h, path: "../escaped" }),
      encodeHeader({ ...h, path: "proc/x" }),
      encodeHeader({ ...h, path: ".aenv/x" }),
      encodeHeader({ ...h, path: "ok" }),
      END_OF_ARCHIVE,
    ]);
    await applyLayer(
      (async function* () {
        yield layer;
      })(),
      target,
    );
    assert.deepEqual(readdirSync(target), ["ok"]);
    assert.deepEqual(readdirSync(tmp).includes("escaped"), false);
  });

  it("mounts: tmpfs taken whole, everything else but / skipped", () => {
    const m = parseMounts(
      [
        "1 0 0:1 / / rw - 9p none rw",
        "2 1 0:2 / /tmp rw - tmpfs none rw",
        "3 1 0:3 / /etc/resolv.conf ro - 9p none ro",
        "4 1 0:4 / /my\\040vol rw - 9p none rw",
      ].join("\n"),
    );
    assert.deepEqual([...m.whole], ["tmp"]);
    assert.deepEqual([...m.skip].sort(), ["etc/resolv.conf", "my vol"]);
  });
});
