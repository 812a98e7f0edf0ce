/** The image library against a real registry (Debian's docker-registry on loopback), images pushed by skopeo. */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { hostPlatform, type ImagePullError, ImageStore, type Progress } from "../src/storage/images/index.js";
import { makeTar, OciLayout, push, type Registry, startProxy, startRegistry } from "./helpers/registry.js";

const root = mkdtempSync("/var/tmp/aenv-images-test-");
let registry: Registry;
const layout = new OciLayout(join(root, "layout"));
const random = randomBytes(1 << 20);
const MTIME = 1_700_000_000;

const layer1 = makeTar([
  { name: "etc/", type: "dir" },
  { name: "etc/a.txt", content: "one" },
  { name: "etc/gone.txt", content: "bye" },
  { name: "etc/opq/", type: "dir" },
  { name: "etc/opq/old1", content: "x" },
  { name: "etc/opq/sub/", type: "dir" },
  { name: "etc/opq/sub/old2", content: "y" },
  { name: "usr/", type: "dir" },
  { name: "usr/lib/", type: "dir" },
  { name: "usr/lib/libx.so", content: "libx" },
  { name: "lib", type: "symlink", linkname: "usr/lib" },
  { name: "bin/", type: "dir" },
  { name: "bin/tool", content: "tool", mode: 0o4755 },
  { name: "var/", type: "dir" },
  { name: "var/cache/", type: "dir" },
  { name: "var/cache/big", content: "cache" },
  { name: "dev/", type: "dir" },
  { name: "dev/null", type: "char" },
  { name: "dev/fifo", type: "fifo" },
]);
const layer2 = makeTar([
  { name: "etc/.wh.gone.txt" },
  { name: "var/.wh.cache" },
  { name: "etc/opq/", type: "dir" },
  { name: "etc/opq/.wh..wh..opq" },
  { name: "etc/opq/new", content: "new" },
  { name: "usr/bin/", type: "dir" },
  { name: "usr/bin/tool2", type: "hardlink", linkname: "bin/tool" },
  { name: "home/user/", type: "dir", uid: 1000, gid: 1000, mode: 0o750 },
]);
const layer3 = makeTar([
  { name: "etc/a.txt", content: "three", uid: 1234, gid: 5678, mode: 0o640 },
  { name: "lib/extra.so", content: "extra" },
  { name: "abs", type: "symlink", linkname: "/etc/passwd" },
  { name: "data/random.bin", content: random },
  { name: "etc/gone2.txt", content: "same layer" },
  { name: "etc/.wh.gone2.txt" },
  { name: `deep/${"d".repeat(120)}/file`, content: "long name via pax" },
]);
const config = {
  Env: ["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "EMPTY="],
  WorkingDir: "/home/user",
  User: "user",
  Entrypoint: ["/bin/tool"],
  Cmd: ["--serve", "8080"],
  ExposedPorts: { "8080/tcp": {}, "53/udp": {} },
  Labels: { "org.example": "yes" },
};
const multi = layout.image({
  layers: [
    { tar: layer1, compression: "gzip" },
    { tar: layer2, compression: "zstd" },
    { tar: layer3, compression: "none" },
  ],
  config,
});
layout.tag(multi, "multi");
const perArch = (arch: string) =>
  layout.image({ arch, layers: [{ tar: makeTar([{ name: "arch", content: arch }]), compression: "gzip" }] });
const index = layout.index([perArch("amd64"), perArch("arm64")]);
layout.tag(index, "multiarch");
const corrupt = layout.image({
  layers: [{ tar: makeTar([{ name: "c", content: randomBytes(4096) }]), compression: "gzip" }],
});
layout.tag(corrupt, "corrupt");

// The registry is on loopback: an operator's setting (images.allow_private_registries).
const store = (name: string, extra: Partial<ConstructorParameters<typeof ImageStore>[0]> = {}) =>
  new ImageStore({
    dir: join(root, "stores", name),
    authFile: join(root, "no-auth.json"),
    allowPrivateRegistries: true,
    ...extra,
  });

before(async () => {
  registry = await startRegistry();
  await push(layout.dir, "multi", registry.host, "test/multi");
  await push(layout.dir, "multiarch", registry.host, "test/multiarch");
  await push(layout.dir, "corrupt", registry.host, "test/corrupt");
});
after(async () => {
  await registry?.stop();
  rmSync(root, { recursive: true, force: true });
});

describe("pull from a registry", () => {
  const shared = store("shared");
  const events: Progress[] = [];

  test("multi-layer image (gzip, zstd, uncompressed): config, layers, progress", async () => {
    const img = await shared.pull(`${registry.host}/test/multi:multi`, (p) => events.push(p));
    assert.equal(img.ref, `${registry.host}/test/multi:multi`);
    assert.equal(img.digest, multi.digest);
    assert.equal(img.manifestDigest, multi.digest);
    assert.deepEqual(img.config, {
      env: { PATH: "/usr/bin:/bin", LANG: "C.UTF-8", EMPTY: "" },
      workdir: "/home/user",
      user: "user",
      entrypoint: ["/bin/tool"],
      cmd: ["--serve", "8080"],
      exposedPorts: ["8080/tcp", "53/udp"],
      labels: { "org.example": "yes" },
    });
    assert.deepEqual(
      img.layers.map((l) => l.mediaType.split(".").at(-1)),
      ["tar+gzip", "tar+zstd", "tar"],
    );
    assert.deepEqual(img.platform, { os: "linux", architecture: "amd64" });
    assert.equal(img.transfer.blobsFetched, 4);
    assert.equal(img.transfer.layersCached, 0);
    for (const l of img.layers) assert.ok(existsSync(shared.blobs.path(l.digest)));
    const last = events.at(-1)!;
    assert.equal(last.phase, "pull");
    assert.equal(last.layersDone, 3);
    assert.equal(last.bytes, last.totalBytes);
    assert.equal(
      last.totalBytes,
      img.layers.reduce((s, l) => s + l.size, 0),
    );
    for (const l of img.layers) {
      const states = new Set(events.flatMap((e) => e.layers.filter((x) => x.digest === l.digest).map((x) => x.state)));
      assert.ok(states.has("downloading") && states.has("done"), `states of ${l.digest}: ${[...states]}`);
    }
  });

  test("unpack: whiteouts, opaque dirs, hard links, symlinks, devices skipped, owners and modes kept", async () => {
    const img = await shared.pull(`${registry.host}/test/multi:multi`);
    const dest = join(root, "rootfs-multi");
    const unpackEvents: Progress[] = [];
    const r = await shared.unpack(img, dest, (p) => unpackEvents.push(p));
    assert.equal(r.skippedDevices, 2);
    assert.equal(r.hardlinks, 1);
    assert.equal(unpackEvents.at(-1)?.layersDone, 3);
    const f = (p: string) => join(dest, p);
    assert.equal(readFileSync(f("etc/a.txt"), "utf8"), "three");
    const a = statSync(f("etc/a.txt"));
    assert.deepEqual([a.uid, a.gid, a.mode & 0o7777, a.mtimeMs / 1000], [1234, 5678, 0o640, MTIME]);
    assert.ok(!existsSync(f("etc/gone.txt")), "whiteout removes a lower file");
    assert.equal(readFileSync(f("etc/gone2.txt"), "utf8"), "same layer", "a whiteout spares its own layer");
    assert.ok(!existsSync(f("var/cache")) && existsSync(f("var")), "whiteout removes a lower dir");
    assert.deepEqual(readdirSync(f("etc/opq")), ["new"], "opaque dir hides lower contents");
    assert.equal(readlinkSync(f("lib")), "usr/lib");
    assert.equal(readFileSync(f("usr/lib/extra.so"), "utf8"), "extra", "written through an in-rootfs relative symlink");
    assert.equal(readlinkSync(f("abs")), "/etc/passwd", "absolute symlink stored as-is");
    const tool = statSync(f("bin/tool"));
    assert.equal(tool.mode & 0o7777, 0o4755, "setuid as the tar says");
    assert.equal(statSync(f("usr/bin/tool2")).ino, tool.ino);
    assert.equal(tool.nlink, 2);
    assert.ok(!existsSync(f("dev/null")) && !existsSync(f("dev/fifo")));
    const home = statSync(f("home/user"));
    assert.deepEqual([home.uid, home.gid, home.mode & 0o7777], [1000, 1000, 0o750]);
    assert.equal(statSync(f("etc")).mtimeMs / 1000, MTIME, "directory mtimes applied after their children");
    assert.ok(readFileSync(f("data/random.bin")).equals(random));
    assert.equal(readFileSync(f(`deep/${"d".repeat(120)}/file`), "utf8"), "long name via pax");
    assert.deepEqual(
      readdirSync(root).filter((n) => n.includes("partial")),
      [],
    );
    await assert.rejects(shared.unpack(img, dest), (e: ImagePullError) => e.code === "destination-exists");
  });

  test("a second store on the same dir downloads nothing: every layer cached", async () => {
    const proxy = await startProxy(registry.host);
    try {
      const again = store("shared");
      const seen: Progress[] = [];
      const img = await again.pull(`${proxy.host}/test/multi:multi`, (p) => seen.push(p));
      assert.deepEqual(img.transfer, { blobsFetched: 0, bytesFetched: 0, layersCached: 3, bytesFromPeers: 0 });
      assert.deepEqual(
        proxy.requests.filter((r) => r.includes("/blobs/")),
        [],
      );
      assert.equal(proxy.requests.length, 1, "only the tag's manifest");
      assert.deepEqual(
        seen.at(-1)?.layers.map((l) => l.state),
        ["cached", "cached", "cached"],
      );
      // Pinned by digest and already stored: not even the manifest is fetched.
      await again.pull(`${proxy.host}/test/multi@${multi.digest}`);
      assert.equal(proxy.requests.length, 1);
    } finally {
      await proxy.close();
    }
  });

  test("multi-arch index: the host's platform is chosen, another on request, a clear error otherwise", async () => {
    const s = store("arch");
    const host = await s.pull(`${registry.host}/test/multiarch:multiarch`);
    assert.equal(host.digest, index.digest);
    assert.notEqual(host.manifestDigest, index.digest);
    await s.unpack(host, join(root, "arch-host"));
    assert.equal(readFileSync(join(root, "arch-host", "arch"), "utf8"), hostPlatform().architecture);
    const arm = await store("arch", { platform: { os: "linux", architecture: "arm64" } }).pull(
      `${registry.host}/test/multiarch:multiarch`,
    );
    assert.equal(arm.platform.architecture, "arm64");
    await s.unpack(arm, join(root, "arch-arm"));
    assert.equal(readFileSync(join(root, "arch-arm", "arch"), "utf8"), "arm64");
    await assert.rejects(
      store("arch", { platform: { os: "linux", architecture: "s390x" } }).pull(
        `${registry.host}/test/multiarch:multiarch`,
      ),
      (e: ImagePullError) => {
        assert.equal(e.code, "no-platform");
        assert.match(e.message, /no linux\/s390x image in .*\(available: linux\/amd64, linux\/arm64\)/);
        return true;
      },
    );
  });

  test("unknown image: one-line error naming the reference", async () => {
    await assert.rejects(store("x").pull(`${registry.host}/nope`), {
      code: "manifest-unknown",
      message: `manifest unknown: ${registry.host}/nope:latest`,
    });
  });

  test("a corrupted blob in the registry is detected and not stored", async () => {
    const manifest = JSON.parse(readFileSync(join(layout.dir, "blobs", "sha256", corrupt.digest.slice(7)), "utf8"));
    const layer = manifest.layers[0].digest as string;
    const hex = layer.slice(7);
    const data = join(registry.storage, "docker/registry/v2/blobs/sha256", hex.slice(0, 2), hex, "data");
    const bytes = readFileSync(data);
    bytes[bytes.length - 20]! ^= 0xff;
    writeFileSync(data, bytes);
    const s = store("corrupt");
    await assert.rejects(s.pull(`${registry.host}/test/corrupt:corrupt`), (e: ImagePullError) => {
      assert.equal(e.code, "digest-mismatch");
      assert.match(e.message, new RegExp(`digest mismatch: blob ${layer}`));
      return true;
    });
    assert.ok(!existsSync(s.blobs.path(layer)));
    assert.deepEqual(readdirSync(join(root, "stores", "corrupt", "tmp")), []);
  });

  test("manifest pinned by a wrong digest is refused", async () => {
    const wrong = `sha256:${"0".repeat(64)}`;
    await assert.rejects(store("pin").pull(`${registry.host}/test/multi@${wrong}`), /manifest unknown|digest mismatch/);
  });
});

describe("registry auth", () => {
  const authFile = join(root, "auth.json");
  mkdirSync(root, { recursive: true });

  for (const mode of ["bearer", "basic"] as const) {
    test(`${mode}: credentials from a docker config file; refused without`, async () => {
      const proxy = await startProxy(registry.host, mode);
      try {
        writeFileSync(
          authFile,
          JSON.stringify({
            auths: { [`http://${proxy.host}`]: { auth: Buffer.from("alice:s3cret").toString("base64") } },
          }),
        );
        const img = await store(`auth-${mode}`, { authFile }).pull(`${proxy.host}/test/multi:multi`);
        assert.equal(img.digest, multi.digest);
        if (mode === "bearer") assert.equal(proxy.tokensIssued, 1, "one token reused for all requests");
        await assert.rejects(store(`noauth-${mode}`).pull(`${proxy.host}/test/multi:multi`), (e: ImagePullError) => {
          assert.ok(e.code === "unauthorized", e.message);
          assert.match(e.message, /unauthorized/);
          return true;
        });
        writeFileSync(
          authFile,
          JSON.stringify({ auths: { [proxy.host]: { auth: Buffer.from("alice:wrong").toString("base64") } } }),
        );
        await assert.rejects(store(`badauth-${mode}`, { authFile }).pull(`${proxy.host}/test/multi:multi`), {
          code: "unauthorized",
        });
      } finally {
        await proxy.close();
      }
    });
  }

  test("REGISTRY_AUTH_FILE is honoured when no authFile option is given", async () => {
    const proxy = await startProxy(registry.host, "bearer");
    const saved = process.env.REGISTRY_AUTH_FILE;
    try {
      writeFileSync(
        authFile,
        JSON.stringify({ auths: { [proxy.host]: { auth: Buffer.from("alice:s3cret").toString("base64") } } }),
      );
      process.env.REGISTRY_AUTH_FILE = authFile;
      const img = await new ImageStore({ dir: join(root, "stores", "env"), allowPrivateRegistries: true }).pull(
        `${proxy.host}/test/multi:multi`,
      );
      assert.equal(img.digest, multi.digest);
    } finally {
      if (saved === undefined) delete process.env.REGISTRY_AUTH_FILE;
      else process.env.REGISTRY_AUTH_FILE = saved;
      await proxy.close();
    }
  });
});
