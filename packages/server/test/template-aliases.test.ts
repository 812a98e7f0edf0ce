// The template catalog's names: a template answers to its ID, its name and its aliases (and
// `alias:tag`), an ID winning over a name and a name over an alias; imports keep aliases.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { TemplateStore } from "../src/state/template-catalog.js";

const dir = mkdtempSync(join(tmpdir(), "aenv-aliases-"));
after(() => rmSync(dir, { recursive: true, force: true }));

test("a template is found by its aliases, alias:tag included; names and IDs win over aliases", () => {
  const store = new TemplateStore(dir);
  store.save({
    id: "ci-v1",
    name: "ci-v1",
    aliases: ["ci"],
    tags: [{ tag: "stable", buildId: "local", createdAt: new Date(0).toISOString() }],
  });
  store.save({ id: "other", name: "other", aliases: ["ci-v1"] });
  assert.equal(store.get("ci")?.id, "ci-v1");
  assert.equal(store.get("ci:stable")?.id, "ci-v1");
  assert.equal(store.get("ci:nope"), undefined);
  // `other` claims `ci-v1` as an alias, but that is a template's own ID and name.
  assert.equal(store.get("ci-v1")?.id, "ci-v1");
  assert.equal(store.get("missing"), undefined);
  // A template saved before aliases existed has none.
  store.save({ id: "plain", name: "plain" });
  assert.deepEqual(store.get("plain")?.aliases, []);
});
