/**
 * The volume content API against a sandbox that races it: code in a sandbox that mounts the
 * volume can swap any folder or file of it for a symlink at any moment. Each race is driven
 * deterministically: the `resolved` seam runs the swap right after the API has resolved the
 * path and before it acts, the moment a check-then-use implementation is open; an upload's
 * temp file is swapped while its body is still arriving. Nothing outside the volume may
 * change, whatever the outcome of the request.
 */
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { after, beforeEach, describe, test } from "node:test";
import type { VolumeBackend } from "../src/storage/volumes/backend.js";
import { type ContentSeams, VolumeContent } from "../src/storage/volumes/content.js";

const base = mkdtempSync(join(tmpdir(), "aenv-vol-race-"));
after(() => rmSync(base, { recursive: true, force: true }));

let vol: string;
let host: string;

function backend(): VolumeBackend {
  return {
    name: "test",
    create: async () => {},
    root: () => vol,
    free: async () => 1 << 30,
    remove: async () => {},
    attach: async () => {},
    detach: async () => {},
  };
}

const content = (seams: ContentSeams = {}) => new VolumeContent(backend(), 1 << 30, seams);

/** What a sandbox does: the folder `rel` (inside the volume) becomes a link to the host folder. */
function swapForLink(rel: string): void {
  renameSync(join(vol, rel), join(vol, `${rel}.moved`));
  symlinkSync(host, join(vol, rel));
}

let n = 0;
beforeEach(() => {
  const dir = join(base, String(n++));
  vol = join(dir, "vol");
  host = join(dir, "host");
  mkdirSync(join(vol, "d"), { recursive: true });
  mkdirSync(host);
  writeFileSync(join(vol, "d", "keep"), "volume's own");
  writeFileSync(join(host, "keep"), "host file");
  chmodSync(join(host, "keep"), 0o600);
});

/** The host folder as it was set up: one file, its content and mode unchanged. */
function assertHostUntouched(): void {
  assert.deepEqual(readdirSync(host).sort(), ["keep"]);
  assert.equal(statSync(join(host, "keep")).mode & 0o777, 0o600);
  assert.equal(statSync(join(host, "keep")).uid, 0);
}

const swapAt = (target: string, folder: string): ContentSeams => ({
  resolved: (rel) => {
    if (rel === target) swapForLink(folder);
  },
});

describe("volume content under a racing sandbox", () => {
  test("DELETE: a folder swapped for a link after resolution does not remove a host file", async () => {
    await content(swapAt("/d/keep", "d"))
      .remove("v", "/d/keep")
      .catch(() => {});
    assert.ok(existsSync(join(host, "keep")), "the host file outside the volume was removed");
    assertHostUntouched();
  });

  test("DELETE of a folder: a sub-folder swapped mid-way is unlinked as a link, the host keeps its files", async () => {
    mkdirSync(join(vol, "d", "sub"));
    writeFileSync(join(vol, "d", "sub", "f"), "x");
    await content(swapAt("/d", "d/sub"))
      .remove("v", "/d")
      .catch(() => {});
    assertHostUntouched();
  });

  test("PUT: a new file does not land in a host folder swapped in for its parent", async () => {
    await content(swapAt("/d/new", "d"))
      .write("v", "/d/new", Readable.from([Buffer.from("attacker")]), {})
      .catch(() => {});
    assertHostUntouched();
  });

  test("PUT: a temp file swapped for a link while the body arrives does not chmod/chown a host file", async () => {
    const body = new PassThrough();
    const c = content();
    const done = c.write("v", "/d/up", body, { mode: 0o777, uid: 1000, gid: 1000 }).catch(() => {});
    body.write("first half ");
    // The temp file exists once the first bytes arrived; the sandbox swaps it for a link.
    let tmp: string | undefined;
    for (let i = 0; i < 200 && !tmp; i++) {
      await new Promise((r) => setTimeout(r, 5));
      tmp = readdirSync(join(vol, "d")).find((f) => f.startsWith(".aenv-upload-"));
    }
    assert.ok(tmp, "the upload's temp file never appeared");
    rmSync(join(vol, "d", tmp));
    symlinkSync(join(host, "keep"), join(vol, "d", tmp));
    body.end("second half");
    await done;
    assertHostUntouched();
  });

  test("mkdir: a parent swapped for a link does not create a folder on the host", async () => {
    await content(swapAt("/d/made", "d"))
      .makeDir("v", "/d/made", { mode: 0o777 })
      .catch(() => {});
    assertHostUntouched();
  });

  test("metadata: a parent swapped for a link does not chmod/chown the host file", async () => {
    await content(swapAt("/d/keep", "d"))
      .setMetadata("v", "/d/keep", { mode: 0o777, uid: 1000 })
      .catch(() => {});
    assertHostUntouched();
  });

  test("list: a folder swapped for a link lists nothing of the host", async () => {
    writeFileSync(join(host, "secret-name"), "");
    const entries = await content(swapAt("/d", "d"))
      .list("v", "/d")
      .catch(() => []);
    assert.ok(!entries.some((e) => e.name === "secret-name"), "a host folder's entries were listed");
  });

  test("read: a parent swapped for a link does not read a host file", async () => {
    const got = await content(swapAt("/d/keep", "d"))
      .read("v", "/d/keep")
      .then(async ({ stream }) => {
        const chunks: Buffer[] = [];
        for await (const c of stream) chunks.push(c as Buffer);
        return Buffer.concat(chunks).toString();
      })
      .catch(() => "");
    assert.notEqual(got, "host file");
  });
});
