import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { Template } from "e2b";
import { instructions, parseDockerfile, startCommand, words } from "../src/dockerfile.js";
import { shellQuote } from "../src/parse.js";
import { specToTemplate } from "../src/template-spec.js";

describe("Dockerfile-like specs", () => {
  test("continuations and comments; line numbers of each instruction", () => {
    const ins = instructions("# c\nFROM a\n\nRUN echo 1 && \\\n  # inner comment\n  echo 2\nENV A=1\n");
    assert.deepEqual(
      ins.map((i) => [i.line, i.keyword, i.rest]),
      [
        [2, "FROM", "a"],
        [4, "RUN", "echo 1 &&   echo 2"],
        [7, "ENV", "A=1"],
      ],
    );
  });

  test("fills the SDK parser's gaps: quoted and legacy ENV, exec-form RUN, --chmod, substitution", () => {
    const s = parseDockerfile(
      [
        "FROM reg:5000/tiny:1 AS build",
        'ENV A="hello world" B=2',
        "ENV LEGACY some value here",
        "ARG VER=1.2",
        "ARG NODEFAULT",
        'RUN ["echo", "a b", "it\'s"]',
        "WORKDIR /srv/$VER",
        "COPY --chown=user:user --chmod=755 a.sh b/ /dst/",
        "USER nobody",
        "EXPOSE 8080",
        'ENTRYPOINT ["httpd", "-f"]',
        'CMD ["-p", "8080"]',
        "HEALTHCHECK --interval=5s CMD wget -q -O /dev/null http://127.0.0.1:8080/",
      ].join("\n"),
    );
    assert.equal(s.from, "reg:5000/tiny:1");
    assert.deepEqual(s.steps, [
      { kind: "env", line: 2, vars: { A: "hello world", B: "2" } },
      { kind: "env", line: 3, vars: { LEGACY: "some value here" } },
      { kind: "env", line: 4, vars: { VER: "1.2" } },
      { kind: "run", line: 6, cmd: "echo 'a b' 'it'\\''s'" },
      { kind: "workdir", line: 7, path: "/srv/1.2" },
      { kind: "copy", line: 8, src: "a.sh", dest: "/dst/", user: "user", mode: 0o755 },
      { kind: "copy", line: 8, src: "b/", dest: "/dst/", user: "user", mode: 0o755 },
      { kind: "user", line: 9, user: "nobody" },
    ]);
    assert.equal(s.startCmd, "httpd -f -p 8080");
    assert.equal(s.readyCmd, "wget -q -O /dev/null http://127.0.0.1:8080/");
    assert.ok(s.notes.some((n) => n.startsWith("line 10: EXPOSE")));
  });

  test("unsupported instructions and forms are refused with their line", () => {
    const bad: Array<[string, RegExp]> = [
      ["RUN true", /no FROM|before FROM/],
      ["FROM a\nFROM b", /line 2: FROM: multi-stage/],
      ["FROM scratch", /line 1: FROM: 'scratch'/],
      ["FROM a\nCOPY --from=b /x /y", /line 2: COPY: --from/],
      ['FROM a\nSHELL ["/bin/bash"]', /line 2: SHELL: is not supported/],
      ["FROM a\nONBUILD RUN x", /line 2: ONBUILD/],
      ["FROM a\nRUN <<EOF\necho\nEOF", /line 2: RUN: heredocs/],
      ["FROM a\nRUN --mount=type=cache,target=/x true", /line 2: RUN: --mount/],
      ["FROM a\nADD https://x/y.tgz /z", /line 2: ADD: URL sources/],
      ["FROM a\nADD site.tar.gz /z", /line 2: ADD: archives/],
      ["FROM a\nENV A", /line 2: ENV: needs KEY=VALUE|needs a value/],
      ["FROM a\nCOPY onlyone", /line 2: COPY: needs a source and a destination/],
      ['FROM a\nENV A="open', /line 2: ENV: unterminated quote/],
      ["FROM a\nRUN x \\", /ends inside a continued line/],
    ];
    for (const [text, re] of bad) assert.throws(() => parseDockerfile(text), re, text);
  });

  test("CMD/ENTRYPOINT combine as Docker does", () => {
    assert.equal(startCommand(undefined, { shell: "npm start" }), "npm start");
    assert.equal(startCommand({ exec: ["a"] }, { exec: ["b c"] }), "a 'b c'");
    assert.equal(startCommand({ shell: "run.sh" }, { exec: ["ignored"] }), "run.sh");
    assert.equal(startCommand(undefined, undefined), undefined);
    assert.deepEqual(words(`a "b c" 'd e' f\\ g`), ["a", "b c", "d e", "f g"]);
    assert.equal(shellQuote("/usr/bin/x"), "/usr/bin/x");
  });

  test("becomes the SDK builder's steps, with the SDK's user/workdir conventions", async () => {
    const ctx = mkdtempSync("/tmp/aenv-cli-spec-");
    try {
      writeFileSync(join(ctx, "a.txt"), "x");
      writeFileSync(join(ctx, ".dockerignore"), "# comment\n*.log\n");
      const spec = parseDockerfile('FROM img:1\nENV A=\'x y\'\nCOPY a.txt /a.txt\nRUN false\nCMD ["sleep", "1"]\n');
      const { template, stepLines } = specToTemplate(spec, ctx, "true");
      const json = JSON.parse(await Template.toJSON(template, false)) as {
        fromImage: string;
        startCmd: string;
        readyCmd: string;
        steps: Array<{ type: string; args: string[] }>;
      };
      assert.equal(json.fromImage, "img:1");
      assert.equal(json.startCmd, "sleep 1");
      assert.equal(json.readyCmd, "true");
      assert.deepEqual(
        json.steps.map((s) => s.type),
        ["USER", "WORKDIR", "ENV", "COPY", "RUN", "USER", "WORKDIR"],
      );
      assert.deepEqual(json.steps[2]?.args, ["A", "x y"]);
      // Server step 5 is the RUN on line 4.
      assert.equal(stepLines[4], 4);
      assert.equal(stepLines.length, json.steps.length);
    } finally {
      rmSync(ctx, { recursive: true, force: true });
    }
  });
});
