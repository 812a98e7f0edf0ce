// Two servers on one machine sharing one snapshot repository (posix_fs, as a shared filesystem
// would be): a snapshot taken on A starts on B, fetched on demand into B's own cache; small
// changes upload little; pause images are committed and rebuilt from the repository; a
// corrupted chunk fails the start clearly; `aenv-server gc` reclaims what nothing references.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { Sandbox, Template } from "e2b";
import { push, type Registry, startRegistry } from "../packages/server/test/helpers/registry.js";
import { tinyImage } from "./helpers/images.js";
import { readEntry, TEST_REPOSITORY_KEY } from "./helpers/repository.js";
import {
  cleanupDataDir,
  getViaHost,
  ROOT,
  sdkOptions,
  startServer,
  TEMPLATES_DIR,
  type TestServer,
  untilCommitted,
} from "./helpers/server.js";

const run = promisify(execFile);

let repo: string;
let a: TestServer;
let b: TestServer;
let registry: Registry;

/** The SDK talks to one server at a time: these point it at A or B. */
const on = sdkOptions;

before(async () => {
  repo = mkdtempSync("/var/tmp/aenv-shared-repo-");
  registry = await startRegistry();
  tinyImage(`${repo}-img`);
  await push(`${repo}-img`, "1", registry.host, "tiny");
  // Pause images are committed at once here (by default after a minute paused).
  // The registry is on loopback: AENV_ALLOW_PRIVATE_REGISTRIES, an operator's setting.
  const env = {
    AENV_REPOSITORY_PATH: repo,
    AENV_GC_INTERVAL: "0",
    AENV_PAUSE_COMMIT_DELAY: "0",
    AENV_ALLOW_PRIVATE_REGISTRIES: "1",
  };
  // Each server its own catalog (sharing the base tree and warm images): B only learns of
  // what A builds through the repository.
  const catalog = (name: string) => {
    const dir = `${repo}-${name}`;
    mkdirSync(dir);
    symlinkSync(join(TEMPLATES_DIR, "base"), join(dir, "base"));
    symlinkSync(join(TEMPLATES_DIR, ".warm"), join(dir, ".warm"));
    return dir;
  };
  a = await startServer({ env, templatesDir: catalog("tpl-a") });
  b = await startServer({
    env: { ...env, AENV_NET_PREFIX: "aeu", AENV_SLOT_CIDR: "10.206.0.0/16" },
    templatesDir: catalog("tpl-b"),
  });
});

/** Templates made here: B takes their warm images in the shared folder after A deleted them. */
const madeTemplates: string[] = [];

after(async () => {
  await Promise.all([a.stop(), b.stop()]);
  const warm = join(TEMPLATES_DIR, ".warm");
  for (const name of existsSync(warm) ? readdirSync(warm) : []) {
    if (madeTemplates.some((id) => name.startsWith(`${id}-r`))) rmSync(join(warm, name), { recursive: true });
  }
  cleanupDataDir(a);
  cleanupDataDir(b);
  await registry.stop();
  rmSync(repo, { recursive: true, force: true });
  for (const d of ["img", "tpl-a", "tpl-b"]) rmSync(`${repo}-${d}`, { recursive: true, force: true });
});

function manifest(id: string): { files: Array<{ chunks: Array<{ sha256: string }> }> } {
  return readEntry(repo, `manifests/${id}.json`);
}

describe("a repository shared by two servers", () => {
  let snapshotId = "";
  let secondId = "";

  test("a snapshot taken on A starts on B; a second snapshot uploads only what changed", async () => {
    const src = await Sandbox.create({ ...on(a), timeoutMs: 120_000 });
    try {
      await src.commands.run("head -c 20000000 /dev/urandom > /home/user/big.bin && echo one > /home/user/note.txt");
      const taken = (await a.api("POST", `/sandboxes/${src.sandboxId}/snapshots`, { name: "shared-snap" })).body as {
        snapshotID: string;
      };
      snapshotId = taken.snapshotID;
      // B asks for the name while A may still be committing: it waits for the commit (the
      // snapshot was announced) and starts it, never a 404...
      const during = await b.api("POST", "/sandboxes", { templateID: "shared-snap" });
      assert.equal(during.status, 201, JSON.stringify(during.body));
      assert.equal(
        (await b.api("DELETE", `/sandboxes/${(during.body as { sandboxID: string }).sandboxID}`)).status,
        204,
      );
      const first = await untilCommitted(a, snapshotId);
      assert.ok(first.uploadedBytes > 10_000_000, `first snapshot uploaded ${first.uploadedBytes}`);
      // ...and again the moment the commit is done.
      const atOnce = await Sandbox.create("shared-snap", on(b));
      assert.equal((await atOnce.commands.run("cat /home/user/note.txt")).stdout, "one\n");
      await atOnce.kill();
      await src.commands.run("echo two > /home/user/note.txt");
      const again = (await a.api("POST", `/sandboxes/${src.sandboxId}/snapshots`, {})).body as { snapshotID: string };
      secondId = again.snapshotID;
      const second = await untilCommitted(a, again.snapshotID);
      // The 20 MB of random file data is unchanged: it is not uploaded again.
      assert.ok(second.uploadedBytes < first.uploadedBytes / 2, `${second.uploadedBytes} vs ${first.uploadedBytes}`);
    } finally {
      await src.kill();
    }
    const onB = await Sandbox.create(snapshotId, on(b));
    try {
      assert.equal((await onB.commands.run("cat /home/user/note.txt")).stdout, "one\n");
      assert.equal((await onB.commands.run("stat -c %s /home/user/big.bin")).stdout.trim(), "20000000");
    } finally {
      await onB.kill();
    }
    const byName = await Sandbox.create("shared-snap", on(b));
    await byName.kill();
  });

  test("a snapshot taken on A starts on B the moment A returns it (B waits for the commit)", async () => {
    const src = await Sandbox.create({ ...on(a), timeoutMs: 120_000 });
    try {
      await src.commands.run("head -c 8000000 /dev/urandom > /home/user/r.bin && echo instant > /home/user/i.txt");
      const taken = await a.api("POST", `/sandboxes/${src.sandboxId}/snapshots`, { name: "instant-snap" });
      assert.equal(taken.status, 201);
      const id = (taken.body as { snapshotID: string }).snapshotID;
      // No wait for the commit: by name and by ID, at once.
      const [byName, byId] = await Promise.all([Sandbox.create("instant-snap", on(b)), Sandbox.create(id, on(b))]);
      try {
        assert.equal((await byName.commands.run("cat /home/user/i.txt")).stdout, "instant\n");
        assert.equal((await byId.commands.run("stat -c %s /home/user/r.bin")).stdout.trim(), "8000000");
      } finally {
        await Promise.all([byName.kill(), byId.kill()]);
      }
      const pendingLeft = () => readdirSync(join(repo, "pending")).length;
      for (let i = 0; i < 50 && pendingLeft() > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.equal(pendingLeft(), 0, "the announcement is withdrawn after the commit");
    } finally {
      await src.kill();
    }
  });

  test("GET /snapshots shows what other servers committed; a deletion through one is seen by the other", async () => {
    const ids = async (s: TestServer) =>
      ((await s.api("GET", "/snapshots")).body as Array<{ snapshotID: string }>).map((x) => x.snapshotID);
    assert.ok((await ids(b)).includes(secondId), "B lists a snapshot only A took");
    assert.equal((await b.api("GET", `/snapshots/${secondId}`)).status, 200);
    assert.equal((await b.api("DELETE", `/templates/${secondId}`)).status, 204);
    assert.ok(!(await ids(a)).includes(secondId), "A no longer lists it");
    assert.ok((await ids(a)).includes(snapshotId));
    assert.equal((await a.api("GET", `/snapshots/${secondId}`)).status, 404);
    assert.equal((await a.api("POST", "/sandboxes", { templateID: secondId })).status, 404);
  });

  test("a paused sandbox is committed; its image is rebuilt from the repository if lost", async () => {
    const s = await Sandbox.create({ ...on(a), timeoutMs: 120_000 });
    await s.commands.run("echo kept > /home/user/p.txt");
    await s.pause();
    const m = join(repo, "manifests", `sbx-${s.sandboxId}.json`);
    for (let i = 0; i < 200 && !existsSync(m); i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(existsSync(m), "pause manifest committed");
    // The node loses its local copy of the pause image.
    rmSync(join(a.dataDir, "sandboxes", s.sandboxId, "image"), { recursive: true, force: true });
    const r = await Sandbox.connect(s.sandboxId, on(a));
    assert.equal((await r.commands.run("cat /home/user/p.txt")).stdout, "kept\n");
    await r.kill();
    for (let i = 0; i < 100 && existsSync(m); i++) await new Promise((res) => setTimeout(res, 100));
    assert.equal(existsSync(m), false, "pause manifest removed once resumed");
  });

  test("a corrupted chunk fails the start with an error naming the snapshot", async () => {
    const src = await Sandbox.create({ ...on(a), timeoutMs: 120_000 });
    const snap = (await a.api("POST", `/sandboxes/${src.sandboxId}/snapshots`, {})).body as { snapshotID: string };
    await untilCommitted(a, snap.snapshotID);
    await src.kill();
    // Flip a byte in every chunk only this snapshot has: B has never seen them.
    const others = new Set<string>();
    for (const id of [snapshotId]) for (const f of manifest(id).files) for (const c of f.chunks) others.add(c.sha256);
    let flipped = 0;
    for (const f of manifest(snap.snapshotID).files) {
      for (const c of f.chunks) {
        if (others.has(c.sha256)) continue;
        const p = join(repo, "chunks", c.sha256.slice(0, 2), `${c.sha256}.zst`);
        const bytes = readFileSync(p);
        const at = Math.floor(bytes.length / 2);
        bytes[at] = (bytes[at] as number) ^ 0xff;
        writeFileSync(p, bytes);
        flipped++;
      }
    }
    assert.ok(flipped > 0);
    const r = await b.api("POST", "/sandboxes", { templateID: snap.snapshotID });
    assert.equal(r.status, 500);
    assert.match((r.body as { message: string }).message, new RegExp(`snapshot '${snap.snapshotID}'.*corrupt`));
    assert.equal((await a.api("DELETE", `/templates/${snap.snapshotID}`)).status, 204);
  });

  test("a template built on A starts on B (fetched from the repository)", async () => {
    const t = Template()
      .fromImage(`${registry.host}/tiny:1`)
      .runCmd("echo built-on-a > /www/origin.txt")
      .setStartCmd("httpd -f -p 8080 -h /www", "wget -q -O /dev/null http://127.0.0.1:8080/index.html");
    const built = await Template.build(t, "shared-tpl", on(a));
    madeTemplates.push(built.templateId);
    const prefix = `tpl-${built.templateId}-r`;
    const committed = () => readdirSync(join(repo, "manifests")).some((f) => f.startsWith(prefix));
    for (let i = 0; i < 300 && !committed(); i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(committed(), "template committed to the repository");
    const s = await Sandbox.create("shared-tpl", on(b));
    try {
      const page = await getViaHost(b, `8080-${s.sandboxId}.${b.domain}`, "/origin.txt");
      assert.equal(page.status, 200);
      assert.equal(page.body, "built-on-a\n");
    } finally {
      await s.kill();
    }
    const onB = (await b.api("GET", "/templates/shared-tpl")).body as { templateID: string; buildStatus: string };
    assert.equal(onB.templateID, built.templateId);
    assert.equal(onB.buildStatus, "ready");
  });

  test("a template imported offline (aenv-server import-template) is committed and starts on B", async () => {
    // B has just looked for it (a miss); the import's commit must be seen by B's next lookup.
    assert.equal((await b.api("POST", "/sandboxes", { templateID: "imported" })).status, 404);
    const { stdout } = await run(
      process.execPath,
      [
        join(ROOT, "packages/server/bin/aenv-server.js"),
        "import-template",
        "--data-dir",
        a.dataDir,
        "--templates-dir",
        `${repo}-tpl-a`,
        "--name",
        "imported",
        `oci:${repo}-img:1`,
      ],
      { env: { ...process.env, AENV_REPOSITORY_PATH: repo, AENV_REPOSITORY_KEY: TEST_REPOSITORY_KEY } },
    );
    assert.match(stdout, /committed to the repository/);
    const s = await Sandbox.create("imported", on(b));
    madeTemplates.push(((await b.api("GET", "/templates/imported")).body as { templateID: string }).templateID);
    try {
      assert.equal((await s.commands.run("cat /www/index.html")).stdout, "from the image\n");
    } finally {
      await s.kill();
    }
    assert.equal((await a.api("DELETE", "/templates/imported")).status, 204);
  });

  test("aenv-server gc reclaims chunks nothing references", async () => {
    assert.equal((await a.api("DELETE", "/templates/shared-snap")).status, 204);
    assert.equal((await a.api("DELETE", "/templates/shared-tpl")).status, 204);
    const tplLeft = () => readdirSync(join(repo, "manifests")).some((f) => f.startsWith("tpl-"));
    for (let i = 0; i < 100 && tplLeft(); i++) await new Promise((r) => setTimeout(r, 100));
    for (const s of ((await a.api("GET", "/snapshots")).body as Array<{ snapshotID: string }>) ?? []) {
      await a.api("DELETE", `/templates/${s.snapshotID}`);
    }
    const { stdout } = await run(
      process.execPath,
      [join(ROOT, "packages/server/bin/aenv-server.js"), "gc", "--grace", "0", "--data-dir", a.dataDir],
      { env: { ...process.env, AENV_REPOSITORY_PATH: repo, AENV_REPOSITORY_KEY: TEST_REPOSITORY_KEY } },
    );
    const result = JSON.parse(stdout) as { manifests: number; chunksDeleted: number };
    assert.equal(result.manifests, 0);
    const left = await run("find", [join(repo, "chunks"), "-type", "f"]);
    assert.equal(left.stdout.trim(), "", "no chunk left once nothing references it");
  });
});
