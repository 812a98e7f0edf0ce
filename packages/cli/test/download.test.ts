/**
 * `aenv download` treats what a sandbox answers as hostile (code in it can be root and
 * replace envd): names that would leave the target, link cycles and endless nesting are not
 * followed. A stand-in for the SDK's Sandbox answers like a subverted envd would.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { FileType, type Sandbox } from "e2b";
import { downloadPath } from "../src/commands/files.js";

type Entry = { name: string; type: FileType; symlinkTarget?: string };

function hostile(tree: Record<string, Entry[]>, files: Record<string, string>): Sandbox {
  const files_ = {
    getInfo: async (p: string) => {
      if (p in tree) return { name: p, type: FileType.DIR, symlinkTarget: p.endsWith("loop") ? "/d" : undefined };
      return { name: p, type: FileType.FILE };
    },
    list: async (p: string) => tree[p] ?? [],
    read: async (p: string) => new TextEncoder().encode(files[p] ?? "?"),
  };
  return { files: files_ } as unknown as Sandbox;
}

test("names that escape, link cycles and deep nesting from a sandbox are not followed", async () => {
  const dir = mkdtempSync("/var/tmp/aenv-dl-");
  const target = join(dir, "out");
  try {
    const sbx = hostile(
      {
        "/d": [
          { name: "ok.txt", type: FileType.FILE },
          { name: "../escaped.txt", type: FileType.FILE },
          { name: "..", type: FileType.DIR },
          { name: "a/../../b", type: FileType.FILE },
          { name: "nul\0x", type: FileType.FILE },
          { name: "loop", type: FileType.DIR },
        ],
        "/d/loop": [{ name: "again", type: FileType.FILE }],
      },
      { "/d/ok.txt": "fine" },
    );
    const n = await downloadPath(sbx, "/d", target, target);
    assert.equal(n, 1);
    assert.deepEqual(readdirSync(target), ["ok.txt"]);
    assert.equal(readFileSync(join(target, "ok.txt"), "utf8"), "fine");
    assert.ok(!existsSync(join(dir, "escaped.txt")) && !existsSync(join(dir, "b")));
    // Endless nesting stops with an error instead of filling the disk.
    const deep: Record<string, Entry[]> = {};
    let p = "/n";
    for (let i = 0; i < 100; i++) {
      deep[p] = [{ name: "x", type: FileType.DIR }];
      p = `${p}/x`;
    }
    await assert.rejects(downloadPath(hostile(deep, {}), "/n", join(dir, "deep"), join(dir, "deep")), /nested deeper/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
