// Template builds through the e2b SDK's Template builder: steps run in a sandbox of the base
// tree, the start command is running in the warm image, failures name their step.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { ApiClient, ConnectionConfig, Sandbox, Template } from "e2b";
import { cleanupDataDir, getViaHost, startServer, TEMPLATES_DIR, type TestServer, useE2b } from "./helpers/server.js";

let server: TestServer;
let templatesDir: string;
let context: string;

before(async () => {
  // Own catalog, sharing the base template (and warm images) with the other tests.
  templatesDir = mkdtempSync("/var/tmp/aenv-tpl-");
  symlinkSync(join(TEMPLATES_DIR, "base"), join(templatesDir, "base"));
  mkdirSync(join(TEMPLATES_DIR, ".warm"), { recursive: true });
  symlinkSync(join(TEMPLATES_DIR, ".warm"), join(templatesDir, ".warm"));
  context = mkdtempSync("/var/tmp/aenv-ctx-");
  mkdirSync(join(context, "site", "sub"), { recursive: true });
  writeFileSync(join(context, "site", "index.html"), "<h1>copied site</h1>\n");
  writeFileSync(join(context, "site", "sub", "deep.txt"), "deep\n");
  writeFileSync(join(context, "tool.sh"), "#!/bin/sh\necho tool ran\n");
  // Committing a copy of the whole base tree to the repository is covered elsewhere
  // (repository-shared.test.ts, with a small image); here it would only cost CPU.
  server = await startServer({ templatesDir, env: { AENV_COMMIT_TEMPLATES: "false" } });
  useE2b(server);
});

after(async () => {
  // Built templates' warm images live in the shared folder: remove them through the API.
  for (const name of ["tpl-web", "tpl-fail"]) await server.api("DELETE", `/templates/${name}`).catch(() => {});
  await server.stop();
  cleanupDataDir(server);
  rmSync(templatesDir, { recursive: true, force: true });
  rmSync(context, { recursive: true, force: true });
});

describe("template builds (e2b Template SDK)", () => {
  test("RUN, ENV, WORKDIR, COPY and a start command: a sandbox answers at once", async () => {
    const logs: string[] = [];
    const tpl = Template({ fileContextPath: context })
      .fromTemplate("base")
      .runCmd("echo step-output-marker && mkdir -p /srv && echo built > /srv/built.txt")
      .setEnvs({ GREETING: "hello-env" })
      .setWorkdir("/srv/app")
      .copy("site", "/srv/www")
      .copy("tool.sh", "/usr/local/bin/tool", { mode: 0o755 })
      .setStartCmd("cd /srv/www && python3 -m http.server 8080", "curl -sf http://127.0.0.1:8080/ >/dev/null");
    const built = await Template.build(tpl, "tpl-web", { onBuildLogs: (l) => logs.push(l.message) });
    assert.ok(logs.includes("step-output-marker"), "RUN output is in the build log");
    assert.ok(logs.some((l) => l.startsWith("Step 4: COPY site")));

    const info = (await server.api("GET", `/templates/${built.templateId}`)).body as Record<string, unknown>;
    assert.equal(info.buildStatus, "ready");
    assert.deepEqual(info.names, ["tpl-web"]);
    assert.equal((info.builds as Array<{ status: string }>)[0]?.status, "ready");

    // E2B's build logs route and the publish call its CLI makes, through the SDK's API client.
    const api = new ApiClient(new ConnectionConfig({ apiUrl: server.url, apiKey: server.apiKey })).api;
    const path = { templateID: built.templateId, buildID: String(info.buildID) };
    const bl = await api.GET("/templates/{templateID}/builds/{buildID}/logs", {
      params: { path, query: { limit: 1000 } },
    });
    assert.ok(
      bl.data?.logs.some((e) => e.message === "step-output-marker"),
      JSON.stringify(bl.error),
    );
    const last = await api.GET("/templates/{templateID}/builds/{buildID}/logs", {
      params: { path, query: { direction: "backward", limit: 1 } },
    });
    assert.equal(last.data?.logs.length, 1);
    assert.equal(last.data?.logs[0]?.timestamp, bl.data?.logs.at(-1)?.timestamp, "newest first");
    const pub = await api.PATCH("/v2/templates/{templateID}", {
      params: { path: { templateID: built.templateId } },
      body: { public: true },
    });
    assert.deepEqual(pub.data, { names: ["tpl-web"] });
    assert.equal(((await server.api("GET", "/templates/tpl-web")).body as { public: boolean }).public, true);
    const v1 = await server.api("PATCH", "/templates/tpl-web", { public: "yes" });
    assert.equal(v1.status, 400);
    assert.equal((await server.api("PATCH", "/templates/no-such-template", { public: true })).status, 404);

    const sbx = await Sandbox.create("tpl-web");
    try {
      // The server started at build time is already serving: no retry needed.
      const page = await getViaHost(server, `8080-${sbx.sandboxId}.${server.domain}`, "/index.html");
      assert.equal(page.status, 200);
      assert.equal(page.body, "<h1>copied site</h1>\n");
      const r = await sbx.commands.run("cat /srv/built.txt; echo $GREETING; pwd; cat /srv/www/sub/deep.txt; tool");
      assert.equal(r.stdout, "built\nhello-env\n/srv/app\ndeep\ntool ran\n");
      assert.equal((await sbx.commands.run("stat -c %a /usr/local/bin/tool")).stdout.trim(), "755");
      assert.equal((await sbx.commands.run("whoami")).stdout.trim(), "user");
    } finally {
      await sbx.kill();
    }
  });

  test("a failing RUN step fails the build with its step and log", async () => {
    const tpl = Template().fromTemplate("base").runCmd("echo fine").runCmd("echo about-to-fail >&2; exit 3");
    await assert.rejects(Template.build(tpl, "tpl-fail"), (err: Error) => {
      assert.equal(err.name, "BuildError");
      assert.match(err.message, /step 2 .*exited with code 3/);
      return true;
    });
    const t = (await server.api("GET", "/templates/tpl-fail")).body as { templateID: string; buildID: string };
    const st = (await server.api("GET", `/templates/${t.templateID}/builds/${t.buildID}/status`)).body as {
      status: string;
      reason: { step: string; message: string };
      logEntries: Array<{ message: string; step?: string }>;
    };
    assert.equal(st.status, "error");
    assert.equal(st.reason.step, "2");
    assert.ok(st.logEntries.some((e) => e.message === "about-to-fail" && e.step === "2"));
    // A template without a finished build cannot start sandboxes.
    const r = await server.api("POST", "/sandboxes", { templateID: "tpl-fail" });
    assert.equal(r.status, 400);
  });

  test("bad build requests are refused with clear errors", async () => {
    const bad = async (path: string, body: unknown, status: number, re: RegExp) => {
      const r = await server.api("POST", path, body);
      assert.equal(r.status, status, JSON.stringify(r.body));
      assert.match((r.body as { message: string }).message, re);
    };
    await bad("/v3/templates", { name: "no spaces allowed" }, 400, /invalid template name/);
    await bad("/v3/templates", {}, 400, /name is required/);
    const req = (await server.api("POST", "/v3/templates", { name: "tpl-bad-steps" })).body as {
      templateID: string;
      buildID: string;
    };
    const path = `/v2/templates/${req.templateID}/builds/${req.buildID}`;
    await bad(path, { fromTemplate: "base", steps: [{ type: "HEALTHCHECK", args: [] }] }, 400, /unsupported step/);
    await bad(
      path,
      { fromTemplate: "base", steps: [{ type: "COPY", args: ["a", "/a"], filesHash: "abc" }] },
      400,
      /not uploaded/,
    );
    await bad(path, { fromTemplate: "nope", steps: [] }, 400, /base template 'nope' not found/);
    await bad(`/v2/templates/${req.templateID}/builds/other`, { steps: [] }, 404, /not found/);
    // Upload links are signed; a forged one is refused.
    const link = (await server.api("GET", `/templates/${req.templateID}/files/abc123`)).body as { url: string };
    const forged = link.url.replace(/sig=[0-9a-f]+/, `sig=${"0".repeat(64)}`);
    assert.equal((await fetch(forged, { method: "PUT", body: "x" })).status, 401);
    assert.equal((await server.api("DELETE", "/templates/tpl-bad-steps")).status, 204);
    assert.equal((await server.api("GET", "/templates/tpl-bad-steps")).status, 404);
  });

  test("a build context uploaded for one template is never used by another's build", async () => {
    const mk = async (name: string) =>
      (await server.api("POST", "/v3/templates", { name })).body as { templateID: string; buildID: string };
    const [attacker, victim] = [await mk("tpl-ctx-attacker"), await mk("tpl-ctx-victim")];
    // The hash is the client's word: the attacker uploads its own tarball under the hash the
    // victim's context will have.
    const hash = "c0ffee".repeat(10);
    const linkAnswer = await server.api("GET", `/templates/${attacker.templateID}/files/${hash}`);
    // E2B's spec: 201 (E2B's Python SDK refuses any other status).
    assert.equal(linkAnswer.status, 201);
    const link = linkAnswer.body as { url: string };
    const tar = execFileSync("tar", ["-cf", "-", "-T", "/dev/null"]);
    assert.equal((await fetch(link.url, { method: "PUT", body: tar })).status, 200);
    const mine = (await server.api("GET", `/templates/${attacker.templateID}/files/${hash}`)).body;
    assert.deepEqual(mine, { present: true });
    const theirs = (await server.api("GET", `/templates/${victim.templateID}/files/${hash}`)).body as {
      present: boolean;
    };
    assert.equal(theirs.present, false, "the victim is told to upload its own context");
    const start = await server.api("POST", `/v2/templates/${victim.templateID}/builds/${victim.buildID}`, {
      fromTemplate: "base",
      steps: [{ type: "COPY", args: ["a", "/a"], filesHash: hash }],
    });
    assert.equal(start.status, 400, JSON.stringify(start.body));
    assert.match((start.body as { message: string }).message, /not uploaded/);
    for (const n of ["tpl-ctx-attacker", "tpl-ctx-victim"]) await server.api("DELETE", `/templates/${n}`);
  });

  test("tags: assigned, listed, started by name:tag, removed", async () => {
    const r = await Template.assignTags("tpl-web", ["v1", "stable"]);
    assert.deepEqual(r.tags, ["v1", "stable"]);
    const id = ((await server.api("GET", "/templates/tpl-web")).body as { templateID: string }).templateID;
    const tags = await Template.getTags(id);
    assert.deepEqual(tags.map((t) => t.tag).sort(), ["stable", "v1"]);
    const sbx = await Sandbox.create("tpl-web:v1");
    await sbx.kill();
    await Template.removeTags("tpl-web", ["v1"]);
    assert.equal((await server.api("POST", "/sandboxes", { templateID: "tpl-web:v1" })).status, 404);
    const bad = await server.api("POST", "/templates/tags", { target: "tpl-web", tags: ["no spaces"] });
    assert.equal(bad.status, 400);
  });

  test("built templates survive a restart; delete removes them", async () => {
    server = await (async () => {
      await server.stop();
      return server.restart();
    })();
    useE2b(server);
    const list = (await server.api("GET", "/v2/templates")).body as Array<{ names: string[]; buildStatus: string }>;
    assert.equal(list.find((t) => t.names[0] === "tpl-web")?.buildStatus, "ready");
    const sbx = await Sandbox.create("tpl-web");
    const page = await getViaHost(server, `8080-${sbx.sandboxId}.${server.domain}`, "/index.html");
    assert.equal(page.status, 200);
    // In use: refused; once the sandbox is gone: removed.
    assert.equal((await server.api("DELETE", "/templates/tpl-web")).status, 409);
    await sbx.kill();
    assert.equal((await server.api("DELETE", "/templates/tpl-web")).status, 204);
    assert.equal((await server.api("POST", "/sandboxes", { templateID: "tpl-web" })).status, 404);
  });
});
