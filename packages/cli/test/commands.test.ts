import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, test } from "node:test";
import { completionScript } from "../src/commands/completion.js";
import { buildProgram } from "../src/program.js";

const BIN = join(import.meta.dirname, "..", "bin", "aenv.js");

describe("new commands: help, completion", () => {
  test("pull, build, template ls|rm|watch have help with examples; start has --cold", () => {
    const p = buildProgram();
    const find = (...path: string[]) =>
      path.reduce<ReturnType<typeof buildProgram> | undefined>((c, n) => c?.commands.find((x) => x.name() === n), p);
    for (const path of [["pull"], ["build"], ["template", "ls"], ["template", "rm"], ["template", "watch"]]) {
      const c = find(...path);
      assert.ok(c, path.join(" "));
      let help = "";
      c.configureOutput({ writeOut: (s) => (help += s) });
      c.outputHelp();
      assert.match(help, /Examples:\n {2}\$ aenv /, path.join(" "));
    }
    const start = find("start");
    assert.ok(start?.options.some((o) => o.long === "--cold"));
    assert.ok(find("pull")?.options.some((o) => o.long === "--probe"));
  });

  test("scripts complete sandbox IDs and template names through the hidden __complete", () => {
    const p = buildProgram();
    for (const sh of ["bash", "zsh", "fish"]) {
      const s = completionScript(sh, p);
      assert.match(s, /aenv __complete sandboxes 2>\/dev\/null/, sh);
      assert.match(s, /aenv __complete templates 2>\/dev\/null/, sh);
      assert.doesNotMatch(s, /-a __complete|compadd -- __complete| __complete --help/, `${sh}: hidden`);
    }
    assert.equal(spawnSync("bash", ["-n"], { input: completionScript("bash", p) }).status, 0);
  });

  test("__complete is silent and succeeds when the server is unreachable", () => {
    const r = spawnSync(process.execPath, [BIN, "__complete", "sandboxes"], {
      env: { ...process.env, AENV_API_URL: "http://127.0.0.1:1", AENV_API_KEY: "k" },
      encoding: "utf8",
      timeout: 10_000,
    });
    assert.equal(r.status, 0);
    assert.equal(r.stdout, "");
    assert.equal(r.stderr, "");
  });
});
