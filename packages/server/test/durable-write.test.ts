// Publishing renames are durable: the file is fsynced before it is renamed into place and its
// folder after, checked on the real system calls (strace -y names each descriptor's path).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { after, test } from "node:test";
import { writeFileDurable, writeFileDurableSync } from "../src/util/durable-write.js";

const SRC = resolve(import.meta.dirname, "..", "src");
const dir = mkdtempSync("/var/tmp/aenv-durable-");
after(() => rmSync(dir, { recursive: true, force: true }));

const hasStrace = (() => {
  try {
    execFileSync("strace", ["-V"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

/** Runs `body` (TypeScript, `SRC` in scope) in a child under strace; the trace lines. */
function traced(name: string, body: string): string[] {
  const script = join(dir, `${name}.mts`);
  writeFileSync(script, `const SRC = ${JSON.stringify(SRC)};\n${body}\n`);
  const out = join(dir, `${name}.trace`);
  execFileSync(
    "strace",
    [
      "-f",
      "-y",
      "-qq",
      "-o",
      out,
      "-e",
      "trace=fsync,fdatasync,rename,renameat,renameat2",
      process.execPath,
      "--import",
      "tsx",
      script,
    ],
    { stdio: "ignore", cwd: resolve(SRC, "..") },
  );
  return readFileSync(out, "utf8").split("\n");
}

/** Index of the first line matching re, asserting there is one. */
function at(lines: string[], re: RegExp, what: string): number {
  const i = lines.findIndex((l) => re.test(l));
  assert.ok(i >= 0, `${what} not in the trace:\n${lines.join("\n")}`);
  return i;
}

/** The file behind `final` was fsynced under some temp name, then renamed to it, then its folder fsynced. */
function assertDurablePublish(lines: string[], folder: string, final: string): void {
  const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const rename = at(lines, new RegExp(`rename\\w*\\(.*"${esc(join(folder, final))}"`), `rename to ${final}`);
  const from = /rename\w*\([^"]*"([^"]+)"/.exec(lines[rename] ?? "")?.[1] ?? "";
  const fileSync = at(lines, new RegExp(`f(data)?sync\\(\\d+<${esc(from)}>\\)`), `fsync of ${from}`);
  const dirSyncs = lines.map((l, i) => (new RegExp(`fsync\\(\\d+<${esc(folder)}>\\)`).test(l) ? i : -1));
  assert.ok(fileSync < rename, `${final}: file not fsynced before its rename`);
  assert.ok(
    dirSyncs.some((i) => i > rename),
    `${final}: folder not fsynced after the rename:\n${lines.join("\n")}`,
  );
}

test("writeFileDurableSync: whole content, mode, no temp file left; writeFileDurable the same", async () => {
  const f = join(dir, "a", "b.json");
  writeFileDurableSync(f, "one", { mode: 0o600 });
  writeFileDurableSync(f, "two", { mode: 0o600 });
  assert.equal(readFileSync(f, "utf8"), "two");
  assert.equal(statSync(f).mode & 0o777, 0o600);
  await writeFileDurable(join(dir, "a", "c.json"), Buffer.from("three"));
  assert.equal(readFileSync(join(dir, "a", "c.json"), "utf8"), "three");
  assert.deepEqual(readdirSync(join(dir, "a")).sort(), ["b.json", "c.json"]);
});

test("a failed durable write leaves the old file and no temp file", () => {
  const f = join(dir, "keep.json");
  writeFileDurableSync(f, "old");
  // Writing a folder's name over a file fails at the rename.
  assert.throws(() => writeFileDurableSync(dir, "x"));
  assert.equal(readFileSync(f, "utf8"), "old");
  assert.ok(!readdirSync(resolve(dir, "..")).some((n) => n.startsWith(".aenv-durable-") && n.includes(".tmp-")));
});

test("durable writes fsync the file before the rename and the folder after", { skip: !hasStrace }, () => {
  const target = join(dir, "traced");
  const lines = traced(
    "util",
    `const { renameDurableSync, writeFileDurableSync } = await import(SRC + "/util/durable-write.ts");
     const { writeFileSync } = await import("node:fs");
     writeFileDurableSync(${JSON.stringify(join(target, "state.json"))}, "{}");
     writeFileSync(${JSON.stringify(join(target, "moved.tmp"))}, "x");
     renameDurableSync(${JSON.stringify(join(target, "moved.tmp"))}, ${JSON.stringify(join(target, "moved"))});`,
  );
  assertDurablePublish(lines, target, "state.json");
  assertDurablePublish(lines, target, "moved");
  assert.ok(existsSync(join(target, "moved")));
});

test("the server's publishing writes go through it: template.json, private files", { skip: !hasStrace }, () => {
  const tpl = join(dir, "templates");
  const lines = traced(
    "callers",
    `const { TemplateStore } = await import(SRC + "/state/template-catalog.ts");
     const { writePrivateFile } = await import(SRC + "/util/private-file.ts");
     new TemplateStore(${JSON.stringify(tpl)}).save({ id: "t1", name: "t1" });
     writePrivateFile(${JSON.stringify(join(dir, "secrets", "token"))}, "s3cret");`,
  );
  assertDurablePublish(lines, join(tpl, "t1"), "template.json");
  assertDurablePublish(lines, join(dir, "secrets"), "token");
});
