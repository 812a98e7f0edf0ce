/** The image library without a registry: references, auth config, local sources, and hostile layers. */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { loadCredentials, parseChallenge } from "../src/storage/images/auth.js";
import { type ImagePullError, ImageStore, parseReference, parseSource } from "../src/storage/images/index.js";
import { registryScheme } from "../src/storage/images/registry-client.js";
import { readTar } from "../src/storage/images/tar.js";
import { makeTar, OciLayout, skopeo, type TarSpec } from "./helpers/registry.js";

const root = mkdtempSync("/var/tmp/aenv-images-local-");
after(() => rmSync(root, { recursive: true, force: true }));

describe("references", () => {
  const cases: [string, string, string][] = [
    ["alpine", "docker.io/library/alpine:latest", "registry-1.docker.io"],
    ["alpine:3.20", "docker.io/library/alpine:3.20", "registry-1.docker.io"],
    ["user/app", "docker.io/user/app:latest", "registry-1.docker.io"],
    ["index.docker.io/library/alpine", "docker.io/library/alpine:latest", "registry-1.docker.io"],
    ["ghcr.io/o/r/x:v1", "ghcr.io/o/r/x:v1", "ghcr.io"],
    ["localhost/app", "localhost/app:latest", "localhost"],
    [`host:5000/repo@sha256:${"a".repeat(64)}`, `host:5000/repo@sha256:${"a".repeat(64)}`, "host:5000"],
    [`r.io/x:t@sha256:${"b".repeat(64)}`, `r.io/x:t@sha256:${"b".repeat(64)}`, "r.io"],
    ["[::1]:5000/a/b:c", "[::1]:5000/a/b:c", "[::1]:5000"],
  ];
  for (const [input, want, api] of cases) {
    test(`${input} → ${want}`, () => {
      const r = parseReference(input);
      assert.equal(`${r.registry}/${r.repository}${r.tag ? `:${r.tag}` : ""}${r.digest ? `@${r.digest}` : ""}`, want);
      assert.equal(r.apiHost, api);
    });
  }
  test("bad references are refused clearly", () => {
    for (const bad of ["Alpine", "a@sha256:xyz", "a:b c", "", "a//b"]) {
      assert.throws(
        () => parseReference(bad),
        (e: ImagePullError) => e.code === "bad-reference",
        bad,
      );
    }
  });
  test("sources", () => {
    assert.deepEqual(parseSource("oci:/x/lay:v1"), { kind: "oci", dir: "/x/lay", tag: "v1" });
    assert.deepEqual(parseSource("oci:/x/lay"), { kind: "oci", dir: "/x/lay" });
    assert.deepEqual(parseSource("oci-archive:/a.tar:t"), { kind: "oci-archive", path: "/a.tar", tag: "t" });
    assert.deepEqual(parseSource("docker-archive:/d/a.tar:repo/x:t"), {
      kind: "docker-archive",
      path: "/d/a.tar",
      tag: "repo/x:t",
    });
    assert.equal(parseSource("docker://alpine").kind, "registry");
  });
  test("plain HTTP only for loopback and listed registries", () => {
    assert.equal(registryScheme("localhost:5000"), "http");
    assert.equal(registryScheme("127.0.0.9:80"), "http");
    assert.equal(registryScheme("[::1]:5000"), "http");
    assert.equal(registryScheme("registry-1.docker.io"), "https");
    assert.equal(registryScheme("10.0.0.5:5000"), "https");
    assert.equal(registryScheme("10.0.0.5:5000", ["10.0.0.5:5000"]), "http");
    assert.equal(registryScheme("reg.lan", ["reg.lan"]), "http");
  });
});

describe("auth config", () => {
  test("docker config.json auths, keys normalised", () => {
    const p = join(root, "config.json");
    const b64 = (s: string) => Buffer.from(s).toString("base64");
    writeFileSync(
      p,
      JSON.stringify({
        auths: {
          "https://index.docker.io/v1/": { auth: b64("hub:pw") },
          "https://reg.example:5000/v2/": { auth: b64("u:p:with:colons") },
          "quay.io": { username: "q", password: "qp" },
        },
        credsStore: "desktop",
      }),
    );
    const c = loadCredentials(p);
    assert.deepEqual(c.get("docker.io"), { username: "hub", password: "pw" });
    assert.deepEqual(c.get("reg.example:5000"), { username: "u", password: "p:with:colons" });
    assert.deepEqual(c.get("quay.io"), { username: "q", password: "qp" });
    assert.equal(loadCredentials(join(root, "missing.json")).size, 0);
  });
  test("WWW-Authenticate parsing", () => {
    assert.deepEqual(
      parseChallenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull"',
      ),
      {
        scheme: "bearer",
        params: {
          realm: "https://auth.docker.io/token",
          service: "registry.docker.io",
          scope: "repository:library/alpine:pull",
        },
      },
    );
    assert.deepEqual(parseChallenge('Basic realm="x"'), { scheme: "basic", params: { realm: "x" } });
  });
});

async function* chunks(...bufs: Buffer[]) {
  yield* bufs;
}

describe("tar reader", () => {
  test("ustar, pax long names, hard links and devices come out as written", async () => {
    const long = `${"x".repeat(150)}/y`;
    const tar = makeTar([
      { name: "a/", type: "dir", mode: 0o700 },
      { name: long, content: "hello", uid: 7, gid: 8 },
      { name: "h", type: "hardlink", linkname: long },
      { name: "d", type: "block" },
    ]);
    const got = [];
    for await (const e of readTar(chunks(tar.subarray(0, 700), tar.subarray(700)))) {
      const chunks: Buffer[] = [];
      if (e.header.name !== "a/") for await (const c of e.body) chunks.push(c);
      got.push([e.header.name, e.header.type, e.header.uid, Buffer.concat(chunks).toString(), e.header.linkname]);
    }
    assert.deepEqual(got, [
      ["a/", "dir", 0, "", ""],
      [long, "file", 7, "hello", ""],
      ["h", "hardlink", 0, "", long],
      ["d", "block", 0, "", ""],
    ]);
  });
  test("a corrupt header is an error, not garbage", async () => {
    const tar = makeTar([{ name: "f", content: "x" }]);
    tar[10] = 0x41;
    await assert.rejects(async () => {
      for await (const _ of readTar(chunks(tar)));
    }, /checksum/);
  });
});

/** One single-layer image per case, in one OCI layout. */
const layout = new OciLayout(join(root, "layout"));
const imageOf = (tag: string, ...layers: TarSpec[][]) =>
  layout.tag(layout.image({ layers: layers.map((l) => ({ tar: makeTar(l), compression: "gzip" as const })) }), tag);

describe("hostile layers are refused and write nothing outside", () => {
  const sentinel = join(root, "sentinel");
  mkdirSync(sentinel);
  const store = new ImageStore({ dir: join(root, "store"), authFile: join(root, "none.json") });
  const rel = "../../sentinel/pwned"; // from <root>/roots/<case>
  const cases: [string, TarSpec[][], RegExp][] = [
    [
      "dotdot",
      [[{ name: rel, content: "x" }]],
      /layer escapes the rootfs: "\.\.\/\.\.\/sentinel\/pwned" contains a '\.\.' component/,
    ],
    [
      "absolute",
      [[{ name: `${sentinel}/pwned`, content: "x" }]],
      /layer escapes the rootfs: ".*\/sentinel\/pwned" is an absolute path/,
    ],
    [
      "symlink-root",
      [[{ name: "a", type: "symlink", linkname: "/" }], [{ name: `a${sentinel}/pwned`, content: "x" }]],
      /layer escapes the rootfs: "a\/.*\/pwned" is written through the absolute symlink a -> \//,
    ],
    [
      "symlink-up",
      [
        [
          { name: "b", type: "symlink", linkname: "../../.." },
          { name: "b/sentinel/pwned", content: "x" },
        ],
      ],
      /layer escapes the rootfs: "b\/sentinel\/pwned" is written through the symlink b -> \.\.\/\.\.\/\.\., which leaves the rootfs/,
    ],
    [
      "symlink-chain",
      [
        [
          { name: "d/", type: "dir" },
          { name: "d/c", type: "symlink", linkname: "../e" },
          { name: "e", type: "symlink", linkname: "../.." },
          { name: "d/c/pwned", content: "x" },
        ],
      ],
      /layer escapes the rootfs: "d\/c\/pwned" is written through the symlink e -> \.\.\/\.\./,
    ],
    [
      "hardlink-out",
      [[{ name: "h", type: "hardlink", linkname: "../../sentinel/victim" }]],
      /layer escapes the rootfs: "h" is a hard link to/,
    ],
    [
      "hardlink-abs",
      [[{ name: "h", type: "hardlink", linkname: "/etc/passwd" }]],
      /layer escapes the rootfs: "h" is a hard link to/,
    ],
  ];
  writeFileSync(join(sentinel, "victim"), "v");
  for (const [name, layers, re] of cases) {
    test(name, async () => {
      imageOf(name, ...layers);
      const img = await store.pull(`oci:${layout.dir}:${name}`);
      const dest = join(root, "roots", name);
      await assert.rejects(store.unpack(img, dest), (e: ImagePullError) => {
        assert.equal(e.code, "unsafe-layer");
        assert.match(e.message, re);
        return true;
      });
      assert.deepEqual(readdirSync(sentinel), ["victim"]);
      assert.equal(readFileSync(join(sentinel, "victim"), "utf8"), "v");
      assert.ok(!existsSync(dest), "no half-made rootfs");
      assert.deepEqual(readdirSync(join(root, "roots")), [], "no temp dir left");
      assert.ok(!existsSync("/pwned") && !existsSync(join(root, "pwned")));
    });
  }

  test("a final-component symlink is replaced, not written through", async () => {
    imageOf(
      "replace",
      [{ name: "f", type: "symlink", linkname: `${sentinel}/victim` }],
      [{ name: "f", content: "mine" }],
    );
    const img = await store.pull(`oci:${layout.dir}:replace`);
    const dest = join(root, "ok", "replace");
    await store.unpack(img, dest);
    assert.equal(readFileSync(join(dest, "f"), "utf8"), "mine");
    assert.equal(readFileSync(join(sentinel, "victim"), "utf8"), "v");
  });
});

describe("local sources: oci layout, oci-archive, docker-archive", () => {
  const files: TarSpec[] = [
    { name: "etc/", type: "dir" },
    { name: "etc/os-release", content: "ID=test\n" },
    { name: "bin/", type: "dir" },
    { name: "bin/sh", content: "#!fake", mode: 0o755 },
  ];
  const local = new OciLayout(join(root, "srclayout"));
  local.tag(
    local.image({
      layers: [
        { tar: makeTar(files), compression: "none" }, // docker archives cannot hold zstd layers
        { tar: makeTar([{ name: "etc/.wh.os-release" }, { name: "etc/motd", content: "hi" }]), compression: "gzip" },
      ],
      config: { Cmd: ["/bin/sh"], Env: ["A=1"] },
    }),
    "v1",
  );
  const store = new ImageStore({ dir: join(root, "srcstore"), authFile: join(root, "none.json") });
  const check = async (ref: string, name: string) => {
    const img = await store.pull(ref);
    assert.deepEqual(img.config.cmd, ["/bin/sh"]);
    assert.deepEqual(img.config.env, { A: "1" });
    const dest = join(root, "src-roots", name);
    await store.unpack(img, dest);
    assert.equal(readFileSync(join(dest, "bin/sh"), "utf8"), "#!fake");
    assert.equal(readFileSync(join(dest, "etc/motd"), "utf8"), "hi");
    assert.ok(!existsSync(join(dest, "etc/os-release")));
    return img;
  };

  test("oci:DIR:tag", async () => {
    const img = await check(`oci:${local.dir}:v1`, "oci");
    assert.equal(img.ref, `oci:${local.dir}:v1`);
    await assert.rejects(store.pull(`oci:${local.dir}:nope`), /no image tagged nope \(has: v1\)/);
  });
  test("oci-archive:PATH", async () => {
    const tar = join(root, "img-oci.tar");
    await skopeo("copy", `oci:${local.dir}:v1`, `oci-archive:${tar}:v1`);
    await check(`oci-archive:${tar}`, "oci-archive");
  });
  test("docker-archive:PATH (docker save format)", async () => {
    const tar = join(root, "img-docker.tar");
    await skopeo("copy", `oci:${local.dir}:v1`, `docker-archive:${tar}:example/app:v1`);
    const img = await check(`docker-archive:${tar}`, "docker-archive");
    assert.equal(img.layers.length, 2);
    await check(`docker-archive:${tar}:example/app:v1`, "docker-archive-tagged");
  });
  test("a missing archive is a clear error", async () => {
    await assert.rejects(store.pull(`oci-archive:${root}/nope.tar`), (e: ImagePullError) => e.code === "archive");
  });
});
