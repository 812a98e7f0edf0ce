// The CLI's template workflows against a real server and a real registry: pull (layer
// progress), build from a Dockerfile, template ls/watch/rm, cold starts from an image, and an
// attached `aenv start` on a pulled template driven through tmux.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { push, type Registry, startRegistry } from "../packages/server/test/helpers/registry.js";
import { AENV_BIN, cliRunner } from "./helpers/cli.js";
import { tinyImage } from "./helpers/images.js";
import { cleanupDataDir, startServer, TEMPLATES_DIR, type TestServer } from "./helpers/server.js";

const BIN = AENV_BIN;
let registry: Registry;
let server: TestServer;
let work: string;
let image: string;
const sandboxes = new Set<string>();
const TEMPLATES = ["cli-tiny", "cli-web", "cli-bad"];

const env = () => ({ ...process.env, AENV_API_URL: server.url, AENV_API_KEY: server.apiKey, XDG_CONFIG_HOME: work });
const { aenv, ok } = cliRunner(env);

before(async () => {
  work = mkdtempSync("/var/tmp/aenv-cli-tpl-");
  registry = await startRegistry();
  tinyImage(join(work, "tiny"));
  await push(join(work, "tiny"), "1", registry.host, "tiny");
  image = `${registry.host}/tiny:1`;
  // Own catalog sharing base and the warm images; own network prefix and slot range.
  const templatesDir = join(work, "templates");
  mkdirSync(templatesDir);
  symlinkSync(join(TEMPLATES_DIR, "base"), join(templatesDir, "base"));
  mkdirSync(join(TEMPLATES_DIR, ".warm"), { recursive: true });
  symlinkSync(join(TEMPLATES_DIR, ".warm"), join(templatesDir, ".warm"));
  server = await startServer({
    templatesDir,
    // The registry is on loopback: an operator's setting.
    env: { AENV_NET_PREFIX: "aec", AENV_SLOT_CIDR: "10.205.0.0/16", AENV_ALLOW_PRIVATE_REGISTRIES: "1" },
  });
});

after(async () => {
  for (const id of sandboxes) await server?.api("DELETE", `/sandboxes/${id}`).catch(() => undefined);
  if (server) {
    // Built templates' warm images live in the shared .warm folder: remove them through the API.
    const all = ((await server.api("GET", "/templates")).body ?? []) as Array<{ templateID: string; names: string[] }>;
    for (const t of all)
      if (TEMPLATES.includes(t.names[0] ?? "") || t.names[0]?.startsWith("image-"))
        await server.api("DELETE", `/templates/${t.templateID}`).catch(() => undefined);
    await server.stop();
    cleanupDataDir(server);
  }
  await registry?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("cli: templates from images and Dockerfiles", () => {
  test("pull: layer progress as plain lines when piped, JSON result, probe as ready check", async () => {
    const r = await ok(
      "pull",
      image,
      "--name",
      "cli-tiny",
      "--start-cmd",
      "httpd -f -p 8080 -h /www",
      "--probe",
      "8080",
    );
    const out = JSON.parse(r.stdout) as { templateID: string; buildID: string; name: string };
    assert.equal(out.name, "cli-tiny");
    assert.match(out.templateID, /\S+/);
    assert.match(r.stderr, /^pull layer [0-9a-f]{12} (downloading|done|cached) \d+\/\d+$/m);
    assert.match(r.stderr, /^unpack layer [0-9a-f]{12} extracted \d+\/\d+$/m);
    assert.match(r.stderr, /ready command passed/);

    const ls = JSON.parse((await ok("template", "ls")).stdout) as Array<{
      names: string[];
      buildStatus: string;
      fromImage?: string;
    }>;
    const t = ls.find((x) => x.names[0] === "cli-tiny");
    assert.equal(t?.buildStatus, "ready");
    assert.equal(t?.fromImage, image);
    const table = (await ok("template", "ls", "-o", "table")).stdout;
    assert.match(table, /^ID\s+NAME\s+STATUS\s+FROM\s+UPDATED$/m);
    assert.match(table, new RegExp(`cli-tiny\\s+ready\\s+${image.replace(/[.]/g, "\\.")}\\s+\\d+[smhd] ago`));
    assert.ok((await ok("__complete", "templates")).stdout.split("\n").includes("cli-tiny"));
  });

  test("build: a Dockerfile in the background, watched to the end; its sandboxes serve at once", async () => {
    const ctx = join(work, "ctx");
    mkdirSync(ctx);
    writeFileSync(join(ctx, "page.html"), "copied page\n");
    writeFileSync(
      join(ctx, "Dockerfile"),
      [
        `FROM ${image}`,
        'ENV GREETING="hello cli"',
        "RUN mkdir -p /www && echo built-marker > /www/built.txt && echo run-step-output",
        "COPY page.html /www/page.html",
        "EXPOSE 8080",
        'CMD ["httpd", "-f", "-p", "8080", "-h", "/www"]',
        "HEALTHCHECK CMD wget -q -O /dev/null http://127.0.0.1:8080/page.html",
        "",
      ].join("\n"),
    );
    const started = await ok("build", join(ctx, "Dockerfile"), "--name", "cli-web", "--detach");
    assert.match(started.stderr, /line 5: EXPOSE has no effect/);
    const info = JSON.parse(started.stdout) as { templateID: string; buildID: string; name: string };
    assert.equal(info.name, "cli-web");
    const w = await ok("template", "watch", "cli-web");
    assert.match(w.stderr, /^run-step-output$/m);
    assert.match(w.stderr, /^Step \d+: COPY page\.html/m);
    assert.deepEqual(JSON.parse(w.stdout), { ...info, status: "ready" });
    // Watching a finished build replays it and ends at once; by ID with an explicit build too.
    await ok("template", "watch", info.templateID, info.buildID);

    const id = (JSON.parse((await ok("start", "cli-web", "--detach")).stdout) as { sandboxID: string }).sandboxID;
    sandboxes.add(id);
    const ex = await ok(
      "exec",
      id,
      "--",
      "cat /www/built.txt; echo $GREETING; wget -q -O - http://127.0.0.1:8080/page.html",
    );
    assert.equal(ex.stdout, "built-marker\nhello cli\ncopied page\n");
    assert.ok((await ok("__complete", "sandboxes")).stdout.split("\n").includes(id));

    // In use: refused with a clear line; gone once the sandbox is.
    const busy = await aenv("template", "rm", "cli-web");
    assert.equal(busy.code, 1);
    assert.match(busy.stderr, /^aenv: template 'cli-web' is in use by sandboxes or snapshots/);
    await ok("rm", id);
    sandboxes.delete(id);
    assert.deepEqual(JSON.parse((await ok("template", "rm", "cli-web")).stdout), {
      template: "cli-web",
      result: "removed",
    });
  });

  test("build: a failing step names the step and its Dockerfile line; watch exits 1", async () => {
    const file = join(work, "bad.Dockerfile");
    writeFileSync(file, `FROM ${image}\nRUN echo fine\nRUN echo about-to-fail >&2; exit 3\n`);
    const r = await aenv("build", file, "--name", "cli-bad");
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^about-to-fail$/m);
    assert.match(
      r.stderr,
      /^aenv: build failed: step \d+ \(RUN echo about-to-fail.*exited with code 3 \(.*bad\.Dockerfile line 3\)$/m,
    );
    const w = await aenv("template", "watch", "cli-bad");
    assert.equal(w.code, 1);
    assert.match(w.stderr, /^aenv: build failed: step \d+ .*exited with code 3$/m);
    const unsupported = join(work, "multi.Dockerfile");
    writeFileSync(unsupported, `FROM ${image}\nFROM ${image}\n`);
    const m = await aenv("build", unsupported);
    assert.equal(m.code, 1);
    assert.match(m.stderr, /^aenv: .*multi\.Dockerfile: line 2: FROM: multi-stage builds are not supported/);
  });

  test("start --cold boots an image straight away", async () => {
    const r = await ok("start", "--cold", image, "--detach", "--memory", "256", "--timeout", "120");
    const id = (JSON.parse(r.stdout) as { sandboxID: string }).sandboxID;
    sandboxes.add(id);
    assert.equal((await ok("exec", id, "--", "cat /www/index.html")).stdout, "from the image\n");
    const usage = await aenv("start", "base", "--cpu", "2", "--detach");
    assert.equal(usage.code, 1);
    assert.match(usage.stderr, /--cpu and --memory apply to --cold starts/);
    await ok("rm", id);
    sandboxes.delete(id);
  });
});

describe("cli: attached start through tmux", {
  skip: spawnSync("tmux", ["-V"]).status !== 0 && "tmux not installed",
}, () => {
  const session = `aenv-clitpl-${process.pid}`;
  const tmux = (...args: string[]) => spawnSync("tmux", args, { encoding: "utf8" });
  const pane = () => tmux("capture-pane", "-p", "-t", session).stdout;
  const waitFor = async (re: RegExp, what: string, ms = 30_000) => {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      if (re.test(pane())) return;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.fail(`timed out waiting for ${what}; pane:\n${pane()}`);
  };
  after(() => void tmux("kill-session", "-t", session));

  test("start TEMPLATE attaches a shell: a command's output, then `exit 4` is aenv's exit code", async () => {
    const rcFile = join(work, "rc");
    const cmd = `AENV_API_URL=${server.url} AENV_API_KEY=${server.apiKey} ${process.execPath} ${BIN} start cli-tiny --rm; echo $? > ${rcFile}; sleep 30`;
    assert.equal(tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", cmd).status, 0);
    await waitFor(/Started sandbox \S+/, "the sandbox to start");
    tmux("send-keys", "-t", session, "echo tiny-$((40+2)); cat /www/index.html", "Enter");
    await waitFor(/^tiny-42\s*$/m, "echo output");
    await waitFor(/^from the image\s*$/m, "the image's file");
    tmux("send-keys", "-t", session, "exit 4", "Enter");
    const deadline = Date.now() + 20_000;
    let rc = "";
    while (Date.now() < deadline && !rc) {
      try {
        rc = readFileSync(rcFile, "utf8").trim();
      } catch {
        // not yet
      }
      if (!rc) await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(rc, "4", pane());
    // --rm removed the sandbox.
    assert.deepEqual(JSON.parse((await ok("ls")).stdout), []);
  });
});
