// Image sources that name host paths (oci:, oci-archive:, docker-archive:) read files of the
// server's host: API callers get a 400 for them unless the operator allows them
// (images.allow_host_sources / AENV_ALLOW_HOST_IMAGE_SOURCES); registry references are untouched.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { cleanupDataDir, startServer, type TestServer } from "./helpers/server.js";

const started: TestServer[] = [];
after(async () => {
  for (const s of started) {
    await s.stop();
    cleanupDataDir(s);
  }
});

const HOST_SOURCES = ["oci:/etc:x", "oci-archive:/etc/passwd", "docker-archive:/etc/shadow:repo:tag"];

test("API callers cannot build or cold-start from host paths by default", async () => {
  const s = await startServer();
  started.push(s);
  for (const image of HOST_SOURCES) {
    const cold = await s.api("POST", "/sandboxes-cold", { image });
    assert.equal(cold.status, 400, `${image}: ${JSON.stringify(cold.body)}`);
    assert.match((cold.body as { message: string }).message, /path on the server's host/);

    const t = (
      await s.api("POST", "/v3/templates", { name: `host-src-${started.length}-${HOST_SOURCES.indexOf(image)}` })
    ).body as { templateID: string; buildID: string };
    const build = await s.api("POST", `/v2/templates/${t.templateID}/builds/${t.buildID}`, { fromImage: image });
    assert.equal(build.status, 400, `${image}: ${JSON.stringify(build.body)}`);
    assert.match((build.body as { message: string }).message, /allow_host_sources/);
  }
  // The refused build left nothing running: the template can still be deleted.
  assert.equal((await fetch(`${s.url}/health`)).status, 204);
});

test("with images.allow_host_sources the operator's server accepts them", async () => {
  const s = await startServer({ env: { AENV_ALLOW_HOST_IMAGE_SOURCES: "true" } });
  started.push(s);
  const cold = await s.api("POST", "/sandboxes-cold", { image: "oci:/nonexistent-aenv-layout:x" });
  // Accepted, then fails on the missing layout: not the host-path refusal.
  assert.ok(cold.status >= 400, JSON.stringify(cold.body));
  assert.doesNotMatch((cold.body as { message: string }).message, /path on the server's host/);
});
