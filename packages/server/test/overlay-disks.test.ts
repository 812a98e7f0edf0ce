/** Sandbox disks formatted ahead of starts (runtime/gvisor/overlay-disk.ts). */
import assert from "node:assert/strict";
import { closeSync, mkdtempSync, openSync, readdirSync, readSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import pino from "pino";
import { OverlayDisks } from "../src/runtime/gvisor/overlay-disk.js";

/** ext4's superblock magic (0xEF53, little-endian at byte 1080). */
function isExt4(image: string): boolean {
  const b = Buffer.alloc(2);
  const fd = openSync(image, "r");
  try {
    readSync(fd, b, 0, 2, 1080);
  } finally {
    closeSync(fd);
  }
  return b.readUInt16LE(0) === 0xef53;
}

describe("OverlayDisks", () => {
  const root = mkdtempSync("/var/tmp/aenv-disks-test-");
  after(() => rmSync(root, { recursive: true, force: true }));
  const log = pino({ level: "silent" });

  it("formats the first disk of a size on the start's path, the next ones ahead", async () => {
    const pool = join(root, "pool");
    const disks = new OverlayDisks(pool, log, 2);
    const a = join(root, "a.img");
    await disks.take(a, 64);
    assert.deepEqual(disks.counts, { ahead: 0, inline: 1 });
    assert.ok(isExt4(a), "a formatted ext4 image");
    assert.equal(statSync(a).size, 64 * 2 ** 20);
    await disks.formatted();
    assert.equal(readdirSync(pool).length, 2, "two of that size wait");
    const b = join(root, "b.img");
    await disks.take(b, 64);
    assert.deepEqual(disks.counts, { ahead: 1, inline: 1 });
    assert.ok(isExt4(b));
    assert.equal(statSync(b).size, 64 * 2 ** 20);
    // Another size has none ahead yet.
    await disks.take(join(root, "c.img"), 32);
    assert.equal(disks.counts.inline, 2);
    await disks.formatted();
    assert.equal(readdirSync(pool).length, 4, "two per size");
    await disks.close();
    await disks.take(join(root, "d.img"), 64);
    await disks.formatted();
    assert.equal(readdirSync(pool).length, 3, "a closed pool hands out what it has and formats no more");
  });

  it("starts empty: what an earlier run left (a format cut short) is removed", async () => {
    const pool = join(root, "pool");
    const disks = new OverlayDisks(pool, log, 2);
    assert.equal(readdirSync(pool).length, 0);
    await disks.close();
  });
});
