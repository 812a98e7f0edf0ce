/**
 * At start a node removes what repository commits cut short by a crash left: its own staging
 * folder, and `.commit-*` folders that servers staging in a shared templates folder left over a
 * day ago (a recent one may be another server's commit in progress).
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { prepareHostDirs } from "../src/components/host-dirs.js";
import type { ServerConfig } from "../src/config.js";

test("a start removes staged commits a crash left, not a recent one in a shared templates folder", () => {
  const root = mkdtempSync("/var/tmp/aenv-host-dirs-");
  try {
    const cfg = { dataDir: join(root, "data"), templatesDir: join(root, "templates") } as ServerConfig;
    const staged = join(cfg.dataDir, "commit-staging", "base-0123");
    mkdirSync(staged, { recursive: true });
    writeFileSync(join(staged, "rootfs.tar"), "x");
    const old = join(cfg.templatesDir, ".commit-base-aaaa");
    const recent = join(cfg.templatesDir, ".commit-base-bbbb");
    const other = join(cfg.templatesDir, "base");
    for (const d of [old, recent, other]) mkdirSync(d, { recursive: true });
    const twoDaysAgo = (Date.now() - 48 * 3600_000) / 1000;
    utimesSync(old, twoDaysAgo, twoDaysAgo);
    const paths = prepareHostDirs(cfg);
    assert.equal(paths.commitStaging, join(cfg.dataDir, "commit-staging"));
    assert.equal(existsSync(paths.commitStaging), false);
    assert.equal(existsSync(old), false);
    assert.equal(existsSync(recent), true);
    assert.equal(existsSync(other), true);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
