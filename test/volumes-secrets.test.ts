// Volumes and secrets through the unmodified e2b SDK (2.51.0) against a real aenv-server with
// real runsc sandboxes: the /volumes API, the volume content API (E2B_VOLUME_API_URL), volumes
// mounted into sandboxes, and /secrets.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  Sandbox,
  Secret,
  SecretNotFoundError,
  Volume,
  VolumeError,
  VolumeFileType,
  VolumeNotFoundError,
  VolumePathNotFoundError,
} from "e2b";
import { cleanupDataDir, startServer, type TestServer, useE2b } from "./helpers/server.js";

const LIMIT = 64 * 1024;
let server: TestServer;

function point(s: TestServer): void {
  useE2b(s);
  // The SDK's Volume instances talk to the content API here (same listener as the API).
  process.env.E2B_VOLUME_API_URL = s.url;
}

before(async () => {
  server = await startServer({
    env: { AENV_NET_PREFIX: "aev", AENV_SLOT_CIDR: "10.240.0.0/16", AENV_VOLUME_MAX_SIZE: String(LIMIT) },
  });
  point(server);
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
  delete process.env.E2B_VOLUME_API_URL;
});

/** Host folder of a volume's files (the local backend). */
const hostDir = (id: string) => join(server.dataDir, "volumes", id, "data");

const status = (e: unknown, code: number) => e instanceof VolumeError && e.message.startsWith(`${code}:`);

describe("volumes API", () => {
  test("create, connect, getInfo, list, destroy; unknown volumes", async () => {
    const vol = await Volume.create("vol-api");
    assert.match(vol.volumeId, /^[0-9a-f-]{36}$/);
    assert.equal(vol.name, "vol-api");
    assert.ok(vol.token.length >= 32);
    const info = await Volume.getInfo(vol.volumeId);
    assert.deepEqual(
      { id: info.volumeId, name: info.name, token: info.token },
      { id: vol.volumeId, name: "vol-api", token: vol.token },
    );
    const again = await Volume.connect(vol.volumeId);
    assert.equal(again.token, vol.token);
    assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId && v.name === "vol-api"));

    // Names are unique (sandboxes mount volumes by name) and path-safe.
    await assert.rejects(Volume.create("vol-api"), (e) => status(e, 409));
    await assert.rejects(Volume.create("../x"), (e) => status(e, 400));
    // Two creates of one name at once: one wins.
    const race = await Promise.allSettled([Volume.create("race"), Volume.create("race")]);
    assert.deepEqual(race.map((r) => r.status).sort(), ["fulfilled", "rejected"]);
    for (const r of race) if (r.status === "fulfilled") await Volume.destroy(r.value.volumeId);
    const raw = await server.api("POST", "/volumes", { name: "" });
    assert.equal(raw.status, 400);
    assert.equal((raw.body as { code: number }).code, 400);

    const ghost = "00000000-0000-0000-0000-000000000000";
    await assert.rejects(Volume.getInfo(ghost), VolumeNotFoundError);
    await assert.rejects(Volume.connect(ghost), VolumeNotFoundError);
    assert.equal(await Volume.destroy(ghost), false);

    assert.equal(await Volume.destroy(vol.volumeId), true);
    await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError);
    assert.equal(await Volume.destroy(vol.volumeId), false);
  });
});

describe("volume content API", () => {
  let vol: Volume;
  before(async () => {
    vol = await Volume.create("vol-content");
  });
  after(async () => {
    await Volume.destroy(vol.volumeId).catch(() => {});
  });

  test("files and folders: write, read, stat, list, metadata, remove", async () => {
    const st = await vol.writeFile("/hello.txt", "Hello, volume");
    assert.equal(st.name, "hello.txt");
    assert.equal(st.path, "/hello.txt");
    assert.equal(st.type, VolumeFileType.FILE);
    assert.equal(st.size, 13);
    assert.ok(st.mtime instanceof Date && !Number.isNaN(st.mtime.getTime()));
    assert.equal(await vol.readFile("/hello.txt"), "Hello, volume");
    assert.equal(readFileSync(join(hostDir(vol.volumeId), "hello.txt"), "utf8"), "Hello, volume");
    const bytes = new Uint8Array([0, 1, 2, 255]);
    await vol.writeFile("/bin.dat", bytes.buffer);
    assert.deepEqual(await vol.readFile("/bin.dat", { format: "bytes" }), bytes);
    await vol.writeFile("/empty", "");
    assert.equal(await vol.readFile("/empty"), "");

    // Overwrite only with force.
    await assert.rejects(vol.writeFile("/hello.txt", "x", { force: false }), (e) => status(e, 409));
    await vol.writeFile("/hello.txt", "second", { force: true });
    assert.equal(await vol.readFile("/hello.txt"), "second");

    // Folders: parents only with force.
    await assert.rejects(vol.makeDir("/a/b/c"), VolumePathNotFoundError);
    const dir = await vol.makeDir("/a/b/c", { force: true, mode: 0o750, uid: 1000, gid: 1000 });
    assert.equal(dir.type, VolumeFileType.DIRECTORY);
    assert.equal(dir.mode, 0o750);
    assert.equal(dir.uid, 1000);
    await assert.rejects(vol.makeDir("/a/b/c"), (e) => status(e, 409));
    await vol.writeFile("/a/b/c/deep.txt", "deep", { uid: 1000, gid: 1000, mode: 0o600 });
    const deep = await vol.getInfo("/a/b/c/deep.txt");
    assert.deepEqual([deep.uid, deep.gid, deep.mode, deep.size], [1000, 1000, 0o600, 4]);
    await assert.rejects(vol.writeFile("/missing/x.txt", "x"), VolumePathNotFoundError);

    const top = await vol.list("/");
    assert.deepEqual(top.map((e) => e.name).sort(), ["a", "bin.dat", "empty", "hello.txt"]);
    const twoDeep = await vol.list("/a", { depth: 2 });
    assert.deepEqual(twoDeep.map((e) => e.path).sort(), ["/a/b", "/a/b/c"]);
    await assert.rejects(vol.list("/nope"), VolumePathNotFoundError);

    const meta = await vol.updateMetadata("/hello.txt", { mode: 0o600, uid: 1001, gid: 1002 });
    assert.deepEqual([meta.mode, meta.uid, meta.gid], [0o600, 1001, 1002]);
    const onHost = statSync(join(hostDir(vol.volumeId), "hello.txt"));
    assert.deepEqual([onHost.mode & 0o777, onHost.uid, onHost.gid], [0o600, 1001, 1002]);
    await assert.rejects(vol.updateMetadata("/nope", { mode: 0o600 }), VolumePathNotFoundError);

    assert.equal(await vol.exists("/a/b/c/deep.txt"), true);
    await vol.remove("/a");
    assert.equal(await vol.exists("/a/b/c/deep.txt"), false);
    assert.equal(await vol.exists("/a"), false);
    await assert.rejects(vol.remove("/a"), VolumePathNotFoundError);
    await assert.rejects(vol.remove("/"), (e) => status(e, 400));
  });

  test("the volume token authorises its own volume only", async () => {
    const other = await Volume.create("vol-other");
    try {
      // Another volume's token, no token, a wrong one: 401.
      const stranger = new Volume(vol.volumeId, vol.name, other.token);
      await assert.rejects(stranger.readFile("/hello.txt"), (e: Error) => e.name === "AuthenticationError");
      const q = `/volumecontent/${vol.volumeId}/file?path=%2Fhello.txt`;
      const none = await fetch(`${server.url}${q}`);
      assert.equal(none.status, 401);
      assert.equal(((await none.json()) as { code: number }).code, 401);
      const wrong = await fetch(`${server.url}${q}`, { headers: { authorization: "Bearer nope" } });
      assert.equal(wrong.status, 401);
      const right = await fetch(`${server.url}${q}`, { headers: { authorization: `Bearer ${vol.token}` } });
      assert.equal(right.status, 200);
      // The content API of an unknown volume is a 404.
      const ghost = new Volume("00000000-0000-0000-0000-000000000000", "ghost", vol.token);
      await assert.rejects(ghost.readFile("/x"), VolumePathNotFoundError);
    } finally {
      await Volume.destroy(other.volumeId);
    }
  });

  test("paths cannot leave the volume: '..' and symlinks are refused", async () => {
    writeFileSync(join(server.dataDir, "outside.txt"), "host secret");
    const root = hostDir(vol.volumeId);
    // What a sandbox could plant in a volume it mounts: links out of it.
    symlinkSync("/etc", join(root, "etc-link"));
    symlinkSync(join(server.dataDir, "outside.txt"), join(root, "file-link"));
    mkdirSync(join(root, "real"));
    symlinkSync("..", join(root, "real", "up"));

    for (const p of ["../outside.txt", "/../outside.txt", "/real/../../outside.txt", "/a/../../x"]) {
      await assert.rejects(vol.readFile(p), (e) => status(e, 400), p);
    }
    await assert.rejects(vol.readFile("/file-link"), (e) => status(e, 400));
    await assert.rejects(vol.readFile("/etc-link/passwd"), (e) => status(e, 400));
    await assert.rejects(vol.readFile("/real/up/up/outside.txt"), (e) => status(e, 400));
    await assert.rejects(vol.writeFile("/etc-link/evil", "x"), (e) => status(e, 400));
    await assert.rejects(vol.writeFile("/file-link", "x", { force: true }), (e) => status(e, 400));
    await assert.rejects(vol.makeDir("/etc-link/d", { force: true }), (e) => status(e, 400));
    await assert.rejects(vol.updateMetadata("/file-link", { mode: 0o777 }), (e) => status(e, 400));
    await assert.rejects(vol.list("/etc-link"), (e) => status(e, 400) || e instanceof VolumePathNotFoundError);
    // Links are shown as links, never followed; removing one removes the link only.
    const link = await vol.getInfo("/file-link");
    assert.equal(link.type, VolumeFileType.SYMLINK);
    assert.equal(link.target, join(server.dataDir, "outside.txt"));
    await vol.remove("/file-link");
    // A FIFO planted in the volume would block a plain open: it is not a file to read.
    execFileSync("mkfifo", [join(root, "fifo")]);
    await assert.rejects(vol.readFile("/fifo"), VolumePathNotFoundError);
    assert.equal(readFileSync(join(server.dataDir, "outside.txt"), "utf8"), "host secret");
    // The E2B error shape on the wire.
    const r = await fetch(`${server.url}/volumecontent/${vol.volumeId}/file?path=..%2F..%2Fetc%2Fpasswd`, {
      headers: { authorization: `Bearer ${vol.token}` },
    });
    assert.equal(r.status, 400);
    const body = (await r.json()) as { code: number; message: string };
    assert.equal(body.code, 400);
    assert.match(body.message, /leaves the volume/);
  });

  test("uploads are held to the volume size limit", async () => {
    const v = await Volume.create("vol-limit");
    try {
      await v.writeFile("/a.bin", new Uint8Array(40 * 1024).buffer);
      // Declared length over what is left: refused before a byte is written.
      await assert.rejects(v.writeFile("/b.bin", new Uint8Array(40 * 1024).buffer), (e) => status(e, 413));
      // A stream without a length is cut off when it passes the limit.
      const big = new Blob([new Uint8Array(40 * 1024)]).stream();
      await assert.rejects(v.writeFile("/c.bin", big), (e) => status(e, 413));
      assert.equal(await v.exists("/b.bin"), false);
      assert.equal(await v.exists("/c.bin"), false);
      // Replacing a file counts its old size as free.
      await v.writeFile("/a.bin", new Uint8Array(60 * 1024).buffer, { force: true });
      await v.writeFile("/d.bin", new Uint8Array(2 * 1024).buffer);
    } finally {
      await Volume.destroy(v.volumeId);
    }
  });
});

describe("volumes in sandboxes", () => {
  test("two sandboxes share a volume; it survives pause/resume and the sandboxes; in use it cannot be destroyed", async () => {
    const vol = await Volume.create("shared");
    await vol.writeFile("/from-api.txt", "written through the API");
    const a = await Sandbox.create({ volumeMounts: { "/mnt/data": vol } });
    let b: Sandbox | undefined;
    try {
      const info = await a.getInfo();
      assert.deepEqual(info.volumeMounts, [{ name: "shared", path: "/mnt/data" }]);
      b = await Sandbox.create({ volumeMounts: { "/data": "shared" } });
      assert.equal((await a.commands.run("cat /mnt/data/from-api.txt")).stdout, "written through the API");

      // A writes (as the template's default user), B and the API read it, and it is on the host.
      await a.commands.run("echo from-a > /mnt/data/a.txt && mkdir -p /mnt/data/dir && echo x > /mnt/data/dir/y");
      assert.equal((await b.commands.run("cat /data/a.txt")).stdout, "from-a\n");
      assert.equal(await vol.readFile("/a.txt"), "from-a\n");
      assert.equal(readFileSync(join(hostDir(vol.volumeId), "dir", "y"), "utf8"), "x\n");
      // And the other way round.
      await b.commands.run("echo from-b >> /data/a.txt");
      assert.equal((await a.commands.run("cat /mnt/data/a.txt")).stdout, "from-a\nfrom-b\n");
      // Writes inside a volume do not go to the sandbox's own layer: outside it, they do.
      await a.commands.run("echo private > /tmp/private.txt");
      assert.equal(await vol.exists("/private.txt"), false);

      // In use (running or paused): 409, the volume stays.
      await assert.rejects(Volume.destroy(vol.volumeId), (e) => status(e, 409));

      await a.pause();
      assert.equal((await a.getInfo()).state, "paused");
      await assert.rejects(Volume.destroy(vol.volumeId), (e) => status(e, 409));
      await vol.writeFile("/while-paused.txt", "hello paused");
      const resumed = await Sandbox.connect(a.sandboxId);
      assert.equal((await resumed.commands.run("cat /mnt/data/while-paused.txt")).stdout, "hello paused");
      await resumed.commands.run("echo after-resume > /mnt/data/resumed.txt");
      assert.equal((await b.commands.run("cat /data/resumed.txt")).stdout, "after-resume\n");
      assert.deepEqual((await resumed.getInfo()).volumeMounts, [{ name: "shared", path: "/mnt/data" }]);
    } finally {
      await a.kill().catch(() => {});
      await b?.kill().catch(() => {});
    }
    // The volume outlives its sandboxes; with none left it can go.
    assert.equal(await vol.readFile("/resumed.txt"), "after-resume\n");
    assert.equal(await Volume.destroy(vol.volumeId), true);
    await assert.rejects(Volume.getInfo(vol.volumeId), VolumeNotFoundError);
  });

  test("fork children share the parent's live volume", async () => {
    const vol = await Volume.create("forked");
    const parent = await Sandbox.create({ volumeMounts: { "/work": vol } });
    const children: Sandbox[] = [];
    try {
      await parent.commands.run("echo parent > /work/p.txt");
      const [child] = await parent.fork({ count: 1 });
      if (!(child instanceof Sandbox)) throw child ?? new Error("no fork child");
      children.push(child);
      assert.equal((await child.commands.run("cat /work/p.txt")).stdout, "parent\n");
      await child.commands.run("echo child > /work/c.txt");
      assert.equal((await parent.commands.run("cat /work/c.txt")).stdout, "child\n");
      assert.deepEqual((await child.getInfo()).volumeMounts, [{ name: "forked", path: "/work" }]);
    } finally {
      for (const c of children) await c.kill().catch(() => {});
      await parent.kill().catch(() => {});
      await Volume.destroy(vol.volumeId).catch(() => {});
    }
  });

  test("snapshots keep their mount points: the same volume, or another one at the same path", async () => {
    const vol = await Volume.create("snap-vol");
    const other = await Volume.create("snap-other");
    await other.writeFile("/which.txt", "other");
    const src = await Sandbox.create({ volumeMounts: { "/v": vol } });
    const made: Sandbox[] = [];
    let snapshotId = "";
    try {
      await src.commands.run("echo src > /v/which.txt");
      snapshotId = (await src.createSnapshot()).snapshotId;
      const same = await Sandbox.create(snapshotId);
      made.push(same);
      assert.deepEqual((await same.getInfo()).volumeMounts, [{ name: "snap-vol", path: "/v" }]);
      assert.equal((await same.commands.run("cat /v/which.txt")).stdout, "src\n");
      const swapped = await Sandbox.create(snapshotId, { volumeMounts: { "/v": other } });
      made.push(swapped);
      assert.deepEqual((await swapped.getInfo()).volumeMounts, [{ name: "snap-other", path: "/v" }]);
      assert.equal((await swapped.commands.run("cat /v/which.txt")).stdout, "other");
      // A checkpoint restores only with a mount at every path it was taken with.
      await assert.rejects(Sandbox.create(snapshotId, { volumeMounts: { "/elsewhere": other } }), /400/);
    } finally {
      for (const x of [...made, src]) await x.kill().catch(() => {});
    }
    // Its volume gone, a snapshot starts only with a volume named for that path.
    assert.equal(await Volume.destroy(vol.volumeId), true);
    await assert.rejects(Sandbox.create(snapshotId), /no longer exists/);
    const again = await Sandbox.create(snapshotId, { volumeMounts: { "/v": "snap-other" } });
    await again.kill();
    await Sandbox.deleteSnapshot(snapshotId);
    assert.equal(await Volume.destroy(other.volumeId), true);
  });

  test("bad volume mounts are refused before anything starts", async () => {
    await assert.rejects(Sandbox.create({ volumeMounts: { "/mnt/x": "no-such-volume" } }), /404|not found/);
    const vol = await Volume.create("badmounts");
    try {
      for (const path of ["relative", "/", "/proc/x", "/.aenv", "/mnt/../etc", "/mnt//x"]) {
        const r = await server.api("POST", "/v2/sandboxes", {
          templateID: "base",
          volumeMounts: [{ name: "badmounts", path }],
        });
        assert.equal(r.status, 400, `${path}: ${JSON.stringify(r.body)}`);
        assert.equal((r.body as { code: number }).code, 400);
      }
      const overlap = await server.api("POST", "/v2/sandboxes", {
        templateID: "base",
        volumeMounts: [
          { name: "badmounts", path: "/mnt/a" },
          { name: "badmounts", path: "/mnt/a/b" },
        ],
      });
      assert.equal(overlap.status, 400);
      assert.deepEqual((await server.api("GET", "/v2/sandboxes")).body, []);
    } finally {
      await Volume.destroy(vol.volumeId);
    }
  });
});

describe("secrets", () => {
  const VALUE = "s3cr3t-value-0123456789-never-returned";

  test("create, get, list, update, delete; values are never returned", async () => {
    const seen: string[] = [];
    const created = await Secret.create("OpenAI-Key", VALUE, { metadata: { team: "ml" } });
    assert.match(created.secretId, /^sec_/);
    assert.equal(created.name, "openai-key");
    assert.equal(created.version, 1);
    assert.deepEqual(created.metadata, { team: "ml" });
    assert.equal(JSON.stringify(created).includes(VALUE), false);

    const byName = await Secret.getInfo("openai-key");
    const byId = await Secret.getInfo(created.secretId);
    assert.equal(byName.secretId, created.secretId);
    assert.equal(byId.name, "openai-key");
    assert.equal(await Secret.exists("OPENAI-KEY"), true);

    await assert.rejects(Secret.create("openai-key", "x"), (e: Error) => /409/.test(e.message));
    const bad = await server.api("POST", "/secrets", { name: "sec_reserved", value: "x" });
    assert.equal(bad.status, 400);
    const braces = await server.api("POST", "/secrets", { name: "a{b}", value: "x" });
    assert.equal(braces.status, 400);

    await Secret.create("second", `${VALUE}-2`);
    const p = Secret.list({ limit: 1 });
    const all = [...(await p.nextItems())];
    while (p.hasNext) all.push(...(await p.nextItems()));
    assert.deepEqual(all.map((s) => s.name).sort(), ["openai-key", "second"]);

    const updated = await Secret.update("openai-key", `${VALUE}-new`, { metadata: { team: "infra" } });
    assert.equal(updated.version, 2);
    assert.deepEqual(updated.metadata, { team: "infra" });

    // No answer of any /secrets route carries a value, whatever the route.
    for (const [m, path] of [
      ["GET", "/secrets"],
      ["GET", `/secrets/${created.secretId}`],
      ["GET", "/secrets/second"],
    ] as const) {
      const r = await server.api(m, path);
      seen.push(JSON.stringify(r.body));
    }
    for (const s of seen) assert.equal(s.includes(VALUE), false, s);
    // Nor the server's log.
    assert.equal(server.logs().includes(VALUE), false);

    // Stored where only root can read it.
    const file = join(server.dataDir, "secrets", "secrets.json");
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.equal(statSync(join(server.dataDir, "secrets")).mode & 0o777, 0o700);

    assert.equal(await Secret.destroy("second"), true);
    assert.equal(await Secret.destroy("second"), false);
    await assert.rejects(Secret.getInfo("second"), SecretNotFoundError);
    await assert.rejects(Secret.update("second", "v"), SecretNotFoundError);
    assert.equal(await Secret.exists("second"), false);
  });
});

describe("restart", () => {
  test("volumes (files, tokens) and secrets survive a server crash", async () => {
    const vol = await Volume.create("durable");
    await vol.writeFile("/keep.txt", "kept");
    const sec = await Secret.create("durable-secret", "durable-value");
    await server.crash();
    server = await server.restart();
    point(server);
    const info = await Volume.getInfo(vol.volumeId);
    assert.equal(info.token, vol.token);
    assert.equal(await vol.readFile("/keep.txt"), "kept");
    assert.equal((await Secret.getInfo("durable-secret")).secretId, sec.secretId);
    assert.equal(await Volume.destroy(vol.volumeId), true);
    assert.equal(await Secret.destroy(sec.secretId), true);
  });
});

describe("ext4 volume backend", () => {
  test("the size limit holds for writes from inside a sandbox; mounts are released at stop and reused at start", async () => {
    const size = 8 * 1024 * 1024;
    // Beside the file's server: a network of its own.
    let s = await startServer({
      env: {
        AENV_NET_PREFIX: "aey",
        AENV_SLOT_CIDR: "10.239.0.0/16",
        AENV_VOLUME_BACKEND: "ext4",
        AENV_VOLUME_MAX_SIZE: String(size),
      },
    });
    const mounted = () => readFileSync("/proc/self/mountinfo", "utf8").includes(join(s.dataDir, "volumes"));
    const opts = { apiUrl: s.url, apiKey: s.apiKey };
    try {
      const vol = await Volume.create("ext4-vol", opts);
      assert.equal(mounted(), true);
      const vopts = { apiUrl: s.url };
      assert.deepEqual(await vol.list("/", vopts), []);
      const sbx = await Sandbox.create({ ...opts, sandboxUrl: s.url, volumeMounts: { "/mnt/v": vol } });
      try {
        const dd = await sbx.commands.run("dd if=/dev/zero of=/mnt/v/fill bs=1M count=20 2>&1; echo rc=$?", {
          user: "root",
        });
        assert.match(dd.stdout, /No space left on device/);
        assert.match(dd.stdout, /rc=1/);
        // The sandbox's own disk is not the volume's: it still has room.
        await sbx.commands.run("echo ok > /tmp/room");
        // Full: the content API refuses too.
        await assert.rejects(vol.writeFile("/more.bin", new Uint8Array(1024 * 1024).buffer, vopts), (e) =>
          status(e, 413),
        );
        await sbx.commands.run("rm /mnt/v/fill && echo kept > /mnt/v/kept.txt", { user: "root" });
      } finally {
        await sbx.kill();
      }
      await s.stop();
      assert.equal(mounted(), false);
      s = await s.restart();
      assert.equal(mounted(), true);
      const again = await Volume.connect(vol.volumeId, { apiUrl: s.url, apiKey: s.apiKey });
      assert.equal(await again.readFile("/kept.txt", { apiUrl: s.url }), "kept\n");
      // A crash leaves the mount behind; the next start uses it as it is.
      await s.crash();
      assert.equal(mounted(), true);
      s = await s.restart();
      assert.equal(await again.readFile("/kept.txt", { apiUrl: s.url }), "kept\n");
      assert.equal(readFileSync("/proc/self/mountinfo", "utf8").split(join(s.dataDir, "volumes")).length - 1, 1);
      assert.equal(await Volume.destroy(vol.volumeId, { apiUrl: s.url, apiKey: s.apiKey }), true);
      assert.equal(mounted(), false);
    } finally {
      await s.stop();
      assert.equal(mounted(), false);
      cleanupDataDir(s);
    }
  });
});
