// Templates from OCI images in a real registry (Debian's docker-registry on loopback): the e2b
// SDK's Template builder on a busybox image, and cold starts straight from an image reference.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { Sandbox, Template } from "e2b";
import {
  makeTar,
  OciLayout,
  push,
  type Registry,
  startProxy,
  startRegistry,
} from "../packages/server/test/helpers/registry.js";
import { type EcrStandIn, startEcrStandIn } from "./helpers/ecr-stand-in.js";
import { tinyImage } from "./helpers/images.js";
import { cleanupDataDir, getViaHost, startServer, TEMPLATES_DIR, type TestServer, useE2b } from "./helpers/server.js";

/** An image whose layer tries to write outside the root filesystem. */
function evilImage(dir: string, target: string): void {
  const layout = new OciLayout(dir);
  const img = layout.image({
    layers: [
      {
        tar: makeTar([
          { name: "bin/", type: "dir" },
          { name: "escape", type: "symlink", linkname: target },
          { name: "escape/pwned", content: "outside\n" },
        ]),
        compression: "gzip",
      },
    ],
  });
  layout.tag(img, "1");
}

let registry: Registry;
let server: TestServer;
let work: string;
let templatesDir: string;
let ecr: EcrStandIn;
const AWS_KEYS = { accessKeyId: "AKIAAENVTEST", secretAccessKey: "aws-s3cret-key", region: "eu-west-1" };
const AWS_KEYS_BODY = {
  type: "aws",
  awsAccessKeyId: AWS_KEYS.accessKeyId,
  awsSecretAccessKey: AWS_KEYS.secretAccessKey,
  awsRegion: AWS_KEYS.region,
};
const ECR_PASSWORD = "ecr-t0ken-pa55";

before(async () => {
  work = mkdtempSync("/var/tmp/aenv-img-");
  registry = await startRegistry();
  tinyImage(join(work, "tiny"));
  await push(join(work, "tiny"), "1", registry.host, "tiny");
  mkdirSync(join(work, "sentinel"));
  evilImage(join(work, "evil"), join(work, "sentinel"));
  await push(join(work, "evil"), "1", registry.host, "evil");
  mkdirSync(join(work, "ctx", "site"), { recursive: true });
  writeFileSync(join(work, "ctx", "site", "page.html"), "copied page\n");
  templatesDir = join(work, "templates");
  mkdirSync(templatesDir);
  mkdirSync(join(TEMPLATES_DIR, ".warm"), { recursive: true });
  symlinkSync(join(TEMPLATES_DIR, ".warm"), join(templatesDir, ".warm"));
  ecr = await startEcrStandIn(AWS_KEYS, { username: "AWS", password: ECR_PASSWORD });
  // The registry is on loopback, which only an operator's setting lets pulls reach; ECR's API
  // is the stand-in, through aws-sdk's own endpoint setting.
  server = await startServer({
    templatesDir,
    env: { AENV_ALLOW_PRIVATE_REGISTRIES: "1", AWS_ENDPOINT_URL_ECR: ecr.url },
  });
  useE2b(server);
});

after(async () => {
  for (const name of ["img-web", "img-tags"]) await server.api("DELETE", `/templates/${name}`).catch(() => {});
  await server.stop();
  cleanupDataDir(server);
  await registry.stop();
  await ecr.close();
  rmSync(work, { recursive: true, force: true });
});

describe("templates from OCI images", () => {
  test("Template.fromImage from the local registry with RUN, ENV, WORKDIR, COPY and a start command", async () => {
    const logs: string[] = [];
    const tpl = Template({ fileContextPath: join(work, "ctx") })
      .fromImage(`${registry.host}/tiny:1`)
      .runCmd("echo $IMAGE_VAR > /www/env.txt")
      .setEnvs({ ADDED: "by-env-step" })
      .setWorkdir("/srv/app")
      .copy("site", "/www/site")
      .setStartCmd("httpd -f -p 8080 -h /www", "wget -q -O /dev/null http://127.0.0.1:8080/index.html");
    await Template.build(tpl, "img-web", { onBuildLogs: (l) => logs.push(l.message) });
    assert.ok(
      logs.some((l) => /^pull layer [0-9a-f]{12} (downloading|done|cached)/.test(l)),
      "layer progress logged",
    );
    const sbx = await Sandbox.create("img-web");
    try {
      const page = await getViaHost(server, `8080-${sbx.sandboxId}.${server.domain}`, "/index.html");
      assert.equal(page.status, 200, "the start command serves at once");
      assert.equal(page.body, "from the image\n");
      const copied = await getViaHost(server, `8080-${sbx.sandboxId}.${server.domain}`, "/site/page.html");
      assert.equal(copied.body, "copied page\n");
      const r = await sbx.commands.run("cat /www/env.txt; echo $ADDED; whoami; pwd");
      assert.equal(r.stdout, "from-config\nby-env-step\nuser\n/srv/app\n");
    } finally {
      await sbx.kill();
    }
  });

  test("a tag keeps starting the build it names after the template is rebuilt", async () => {
    const build = (text: string, tag: string) =>
      Template.build(
        Template()
          .fromImage(`${registry.host}/tiny:1`)
          .runCmd(`echo ${text} > /www/which.txt`)
          .setStartCmd("httpd -f -p 8080 -h /www", "wget -q -O /dev/null http://127.0.0.1:8080/which.txt"),
        `img-tags:${tag}`,
      );
    const which = async (ref: string) => {
      const sbx = await Sandbox.create(ref);
      try {
        const page = await getViaHost(server, `8080-${sbx.sandboxId}.${server.domain}`, "/which.txt");
        const file = (await sbx.commands.run("cat /www/which.txt")).stdout;
        assert.equal(page.body, file, "the warm image serves the tree it was taken on");
        return file.trim();
      } finally {
        await sbx.kill();
      }
    };
    await build("first", "v1");
    await Template.assignTags("img-tags:v1", ["stable"]);
    await build("second", "v2");
    assert.equal(await which("img-tags"), "second");
    assert.equal(await which("img-tags:v2"), "second");
    assert.equal(await which("img-tags:v1"), "first");
    assert.equal(await which("img-tags:stable"), "first", "a tag given through another tag names that build");
    const tags = await Template.getTags(
      ((await server.api("GET", "/templates/img-tags")).body as { templateID: string }).templateID,
    );
    const byTag = Object.fromEntries(tags.map((t) => [t.tag, t.buildId]));
    assert.equal(byTag.v1, byTag.stable);
    assert.notEqual(byTag.v1, byTag.v2);
    // The replaced build's own record (status, logs) is still there beside its kept settings.
    const id = ((await server.api("GET", "/templates/img-tags")).body as { templateID: string }).templateID;
    const old = (await server.api("GET", `/templates/${id}/builds/${byTag.v1}/status`)).body as {
      status: string;
      logEntries: unknown[];
    };
    assert.equal(old.status, "ready");
    assert.ok(old.logEntries.length > 0);
    // Moving a tag, removing one: the template itself is untouched.
    await Template.assignTags("img-tags", ["stable"]);
    assert.equal(await which("img-tags:stable"), "second");
    await Template.removeTags("img-tags", ["v1"]);
    assert.equal((await server.api("POST", "/sandboxes", { templateID: "img-tags:v1" })).status, 404);
    assert.equal(await which("img-tags"), "second");
  });

  test("a build's own registry credentials (fromImage with username and password) pull a private image; they are kept nowhere", async () => {
    const proxy = await startProxy(registry.host, "bearer", "trainer", "pa55-private");
    try {
      const image = `${proxy.host}/tiny:1`;
      await assert.rejects(
        Template.build(Template().fromImage(image).runCmd("true"), "img-private-none"),
        /unauthorized/,
        "no credentials: the pull is refused",
      );
      await Template.build(
        Template().fromImage(image, { username: "trainer", password: "pa55-private" }).runCmd("echo ok > /private.txt"),
        "img-private",
      );
      const sbx = await Sandbox.create("img-private");
      try {
        assert.equal((await sbx.commands.run("cat /private.txt")).stdout, "ok\n");
      } finally {
        await sbx.kill();
      }
      assert.ok(proxy.tokensIssued >= 1, "the registry's token was asked for with them");
      // Never written down: not in the template's folder (template.json, build records and
      // logs), not in the server's log.
      const found = spawnSync("grep", ["-rlF", "pa55-private", join(templatesDir, "img-private")], {
        encoding: "utf8",
      });
      assert.equal(found.stdout, "", "credentials in the template's files");
      assert.ok(!server.logs().includes("pa55-private"), "credentials in the server's log");
    } finally {
      for (const name of ["img-private", "img-private-none"])
        await server.api("DELETE", `/templates/${name}`).catch(() => {});
      await proxy.close();
    }
  });

  test("AWS keys (fromAWSRegistry) are traded for ECR's registry token, SigV4-signed, for that pull only", async () => {
    const proxy = await startProxy(registry.host, "bearer", "AWS", ECR_PASSWORD);
    const image = `${proxy.host}/tiny:1`;
    try {
      // The region becomes part of ECR's host name: anything but a region's form is a 400.
      const t = await server.api("POST", "/v2/templates", { alias: "img-aws-bad", cpuCount: 1, memoryMB: 256 });
      const { templateID, buildID } = t.body as { templateID: string; buildID: string };
      const refused = await server.api("POST", `/v2/templates/${templateID}/builds/${buildID}`, {
        fromImage: image,
        fromImageRegistry: { ...AWS_KEYS_BODY, awsRegion: "evil.example#" },
      });
      assert.equal(refused.status, 400);
      assert.match((refused.body as { message: string }).message, /awsRegion.*not an AWS region/);
      // Keys ECR does not know: the build fails saying so, and nothing is pulled.
      await assert.rejects(
        Template.build(
          Template()
            .fromAWSRegistry(image, { ...AWS_KEYS, secretAccessKey: "not-the-secret" })
            .runCmd("true"),
          "img-aws-wrong",
        ),
        /ECR gave no registry token: UnrecognizedClientException/,
      );
      assert.equal(ecr.refused, 1);
      await Template.build(Template().fromAWSRegistry(image, AWS_KEYS).runCmd("echo ecr > /ecr.txt"), "img-aws");
      assert.equal(ecr.issued, 1);
      const sbx = await Sandbox.create("img-aws");
      try {
        assert.equal((await sbx.commands.run("cat /ecr.txt")).stdout, "ecr\n");
      } finally {
        await sbx.kill();
      }
      for (const secret of [AWS_KEYS.secretAccessKey, ECR_PASSWORD]) {
        const found = spawnSync("grep", ["-rlF", secret, join(templatesDir, "img-aws")], { encoding: "utf8" });
        assert.equal(found.stdout, "", "credentials in the template's files");
        assert.ok(!server.logs().includes(secret), "credentials in the server's log");
      }
    } finally {
      for (const name of ["img-aws", "img-aws-wrong", "img-aws-bad"])
        await server.api("DELETE", `/templates/${name}`).catch(() => {});
      await proxy.close();
    }
  });

  test("POST /sandboxes-cold boots an image directly; the second start reuses the unpacked tree", async () => {
    const image = `${registry.host}/tiny:1`;
    const first = await server.api("POST", "/sandboxes-cold", { image, memoryMB: 256, timeout: 60 });
    assert.equal(first.status, 201, JSON.stringify(first.body));
    const id = (first.body as { sandboxID: string }).sandboxID;
    const sbx = await Sandbox.connect(id);
    assert.equal((await sbx.commands.run("cat /www/index.html")).stdout, "from the image\n");
    // As a container runtime would: the image's user, root when it names none.
    assert.equal((await sbx.commands.run("whoami")).stdout, "root\n");
    const info = (await server.api("GET", `/sandboxes/${id}`)).body as { memoryMB: number };
    assert.equal(info.memoryMB, 256);
    const second = await server.api("POST", "/sandboxes-cold", { image });
    assert.equal(second.status, 201);
    const imported = (
      (await server.api("GET", "/templates")).body as Array<{ fromImage?: string; names: string[] }>
    ).filter((t) => t.fromImage === image && t.names[0]?.startsWith("image-"));
    assert.equal(imported.length, 1, "one template per image");
    await server.api("DELETE", `/sandboxes/${id}`);
    await server.api("DELETE", `/sandboxes/${(second.body as { sandboxID: string }).sandboxID}`);
  });

  test("bad images are refused with clear errors and nothing is written outside", async () => {
    const missing = await server.api("POST", "/sandboxes-cold", { image: `${registry.host}/nope:1` });
    assert.equal(missing.status, 400);
    assert.match((missing.body as { message: string }).message, /nope/);
    const evil = await server.api("POST", "/sandboxes-cold", { image: `${registry.host}/evil:1` });
    assert.equal(evil.status, 400);
    assert.match((evil.body as { message: string }).message, /escape/i);
    assert.equal(existsSync(join(work, "sentinel", "pwned")), false);
    const bad = await server.api("POST", "/sandboxes-cold", { image: "", memoryMB: 1 });
    assert.equal(bad.status, 400);
  });
});
