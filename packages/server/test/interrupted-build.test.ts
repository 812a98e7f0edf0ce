/**
 * A build a server left `building` or `waiting` when it died is failed at the next start (the
 * template is not stuck: it can be rebuilt or deleted); one whose server still runs is left.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import pino from "pino";
import type { Orchestrator } from "../src/orchestrator/orchestrator.js";
import { TemplateStore } from "../src/state/template-catalog.js";
import type { ImageProvider } from "../src/templates/build-steps.js";
import { TemplateBuilder } from "../src/templates/builder.js";
import type { ContextFiles } from "../src/templates/context-files.js";

test("builds interrupted by a restart are failed; a live server's build is left alone", () => {
  const dir = mkdtempSync("/var/tmp/aenv-tpl-");
  const cleanup: Array<() => void> = [];
  try {
    const store = new TemplateStore(dir);
    const base = {
      revision: 1,
      rootfsDir: "rootfs-r1",
      user: "user",
      workdir: "/home/user",
      env: {},
      cpuCount: 2,
      memoryMB: 512,
      diskSizeMB: 1024,
      buildCount: 1,
      createdAt: new Date().toISOString(),
      tags: [],
    };
    const dead = store.save({ ...base, id: "tdead", name: "dead", buildId: "b-dead", buildStatus: "building" });
    const live = store.save({ ...base, id: "tlive", name: "live", buildId: "b-live", buildStatus: "waiting" });
    store.save({ ...base, id: "tdone", name: "done", buildId: "b-done", buildStatus: "ready" });
    mkdirSync(join(dead.dir, "builds"), { recursive: true });
    writeFileSync(join(dead.dir, "builds", ".owner"), "999999999");
    mkdirSync(join(live.dir, "builds"), { recursive: true });
    // Another server still building: a process whose command line names aenv-server.
    const other = spawn("sleep", ["30"], { argv0: "aenv-server" });
    writeFileSync(join(live.dir, "builds", ".owner"), String(other.pid));
    const notServer = store.save({ ...base, id: "tnot", name: "not", buildId: "b-not", buildStatus: "building" });
    mkdirSync(join(notServer.dir, "builds"), { recursive: true });
    writeFileSync(join(notServer.dir, "builds", ".owner"), String(process.pid));
    cleanup.push(() => other.kill());
    new TemplateBuilder({
      templates: store,
      orch: {} as Orchestrator,
      files: {} as ContextFiles,
      images: {} as ImageProvider,
      allowHostImageSources: false,
      log: pino({ level: "silent" }),
    });
    assert.equal(store.get("dead")?.buildStatus, "error");
    assert.match(store.get("dead")?.reason?.message ?? "", /interrupted/);
    assert.equal(store.get("live")?.buildStatus, "waiting", "its server still runs");
    assert.equal(store.get("not")?.buildStatus, "error", "a reused PID that is not an aenv-server holds nothing");
    assert.equal(store.get("done")?.buildStatus, "ready", "finished builds are untouched");
  } finally {
    for (const c of cleanup) c();
    rmSync(dir, { recursive: true, force: true });
  }
});
