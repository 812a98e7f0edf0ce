// A registry that stalls or sends too much cannot hold a pull forever or fill memory and disk:
// a fake registry on loopback stalls before its answer, sends an endless manifest, stalls in the
// middle of a layer, or declares a layer over the image size limit; each pull fails promptly
// with a typed ImagePullError. Build logs are bounded too.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ImagePullError, ImageStore } from "../src/storage/images/index.js";
import { appendLog, type BuildRecord } from "../src/templates/build-log.js";

const sha = (b: Buffer | string) => `sha256:${createHash("sha256").update(b).digest("hex")}`;
const MANIFEST = "application/vnd.oci.image.manifest.v1+json";

const layer = Buffer.alloc(64 * 1024, 7);
const config = Buffer.from(
  JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [sha("x")] } }),
);
const manifest = (layerSize: number) =>
  JSON.stringify({
    schemaVersion: 2,
    mediaType: MANIFEST,
    config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: sha(config), size: config.length },
    layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", digest: sha(layer), size: layerSize }],
  });

const open = new Set<ServerResponse>();
let server: Server;
let host = "";
const root = mkdtempSync("/var/tmp/aenv-reglimits-");

before(async () => {
  server = createServer((req, res) => {
    open.add(res);
    res.on("close", () => open.delete(res));
    const url = req.url ?? "";
    if (url === "/v2/" || url === "/v2") return res.end("{}");
    const [, repo, kind, ref] = /^\/v2\/(.+)\/(manifests|blobs)\/(.+)$/.exec(url) ?? [];
    if (repo === "t/stall") return; // never answers
    if (repo === "t/huge" && kind === "manifests") {
      res.writeHead(200, { "content-type": MANIFEST });
      // Chunked and endless: no content-length to refuse it by.
      const pump = () => {
        while (res.write(Buffer.alloc(64 * 1024, 32))) {}
      };
      res.on("drain", pump);
      return pump();
    }
    if (kind === "manifests") {
      const body = manifest(repo === "t/big" ? 100 * 1024 ** 3 : layer.length);
      res.writeHead(200, { "content-type": MANIFEST, "content-length": Buffer.byteLength(body) });
      return res.end(body);
    }
    if (ref === sha(config)) return res.end(config);
    // The layer: a first part, then silence.
    res.writeHead(200, { "content-length": layer.length });
    res.write(layer.subarray(0, 1000));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(async () => {
  for (const r of open) r.destroy();
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
  rmSync(root, { recursive: true, force: true });
});

const store = (name: string) =>
  new ImageStore({
    dir: join(root, name),
    authFile: join(root, "no-auth.json"),
    // The fake registry is on loopback: an operator's setting.
    allowPrivateRegistries: true,
    fetchTimeoutMs: 700,
    maxManifestBytes: 1024 * 1024,
    maxImageBytes: 1024 ** 3,
  });

async function failsWith(p: Promise<unknown>, code: string, withinMs: number): Promise<ImagePullError> {
  const t0 = Date.now();
  const err = await p.then(
    () => assert.fail("the pull succeeded"),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ImagePullError, String(err));
  assert.equal(err.code, code, err.message);
  assert.ok(Date.now() - t0 < withinMs, `took ${Date.now() - t0} ms`);
  return err;
}

test("a registry that never answers is given up on", { timeout: 15_000 }, async () => {
  const err = await failsWith(store("a").pull(`${host}/t/stall:1`), "timeout", 5000);
  assert.match(err.message, /sent nothing/);
});

test("an endless manifest is cut at the manifest size limit", { timeout: 15_000 }, async () => {
  const err = await failsWith(store("b").pull(`${host}/t/huge:1`), "too-large", 5000);
  assert.match(err.message, /over 1048576 bytes/);
});

test("a layer download that stalls half-way is given up on", { timeout: 15_000 }, async () => {
  await failsWith(store("c").pull(`${host}/t/slowblob:1`), "timeout", 5000);
});

test("an image declaring more than the image size limit is refused before any layer moves", async () => {
  const err = await failsWith(store("d").pull(`${host}/t/big:1`), "too-large", 5000);
  assert.match(err.message, /over the limit/);
});

test("a build log is bounded: a build printing without end keeps the start and a truncation note", () => {
  const b: BuildRecord = { templateID: "t", buildID: "b", status: "building", logs: [], startedAt: "" };
  for (let i = 0; i < 5000; i++) appendLog(b, "info", "x".repeat(4096));
  const bytes = b.logs.reduce((n, e) => n + e.message.length, 0);
  assert.ok(bytes <= 4 * 1024 * 1024, `${bytes} bytes of log kept`);
  assert.match(b.logs.at(-1)?.message ?? "", /truncated/);
});
