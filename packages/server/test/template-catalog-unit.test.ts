// The template catalog's cache: a node may hold thousands of on-demand images, so a lookup must
// not read and validate every template.json. What it must still do: see another process's
// writes (by ID at once, by name within a second), re-read a replaced file, and hand out copies.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { TemplateStore } from "../src/state/template-catalog.js";

const dir = mkdtempSync(join(tmpdir(), "aenv-catalog-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("another store's writes: by ID at once, by name within a second; a replaced file is read again", async () => {
  const mine = new TemplateStore(dir);
  const theirs = new TemplateStore(dir);
  mine.save({ id: "a", name: "alpha" });
  assert.equal(mine.get("alpha")?.id, "a");
  theirs.save({ id: "b", name: "beta" });
  assert.equal(mine.get("b")?.name, "beta", "by ID: at once");
  await sleep(1100);
  assert.equal(mine.get("beta")?.id, "b", "by name: after the scan's second");
  theirs.save({ id: "a", name: "alpha", cpuCount: 4 });
  assert.equal(mine.get("a")?.cpuCount, 4, "a replaced template.json is parsed again");
  theirs.remove("b");
  assert.equal(mine.get("b"), undefined);
});

test("what a lookup returns is the caller's own copy", () => {
  const store = new TemplateStore(dir);
  store.save({ id: "c", name: "gamma", aliases: ["g"] });
  const t = store.get("gamma");
  assert.ok(t);
  t.aliases.push("changed");
  t.cpuCount = 99;
  assert.deepEqual(store.get("gamma")?.aliases, ["g"]);
  assert.notEqual(store.get("c")?.cpuCount, 99);
  const listed = store.list().find((x) => x.id === "c");
  assert.ok(listed);
  listed.name = "renamed";
  assert.equal(store.get("c")?.name, "gamma");
});
