// Whoever can write the snapshot repository is not trusted with the host: manifests planted in a
// posix_fs repository (ids that are not their key, template folders with "..", a rootfs outside
// the template trees, symlinked folders) are refused and logged, nothing outside the repository
// is read, written or deleted, and the server keeps answering E2B-shaped errors.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join, relative } from "node:path";
import { after, before, test } from "node:test";
import { cleanupDataDir, startServer, TEMPLATES_DIR, type TestServer } from "./helpers/server.js";

let repo: string;
let victim: string;
let catalog: string;
let server: TestServer;

/** Stores bytes as one chunk, the way the repository does; returns the manifest's file entry. */
function storeFile(name: string, data: Buffer, chunkDir?: string) {
  const sha = createHash("sha256").update(data).digest("hex");
  const dir = chunkDir ?? join(repo, "chunks", sha.slice(0, 2));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, `${sha}.zst`), execFileSync("zstd", ["-q", "-c"], { input: data }));
  return { name, size: data.length, chunks: [{ sha256: sha, size: data.length }] };
}

function writeManifest(key: string, m: Record<string, unknown>): void {
  mkdirSync(join(repo, "manifests"), { recursive: true });
  writeFileSync(join(repo, "manifests", `${key}.json`), JSON.stringify(m));
}

const manifest = (id: string, files: unknown[], meta: Record<string, unknown>) => ({
  version: 2,
  id,
  createdAt: new Date().toISOString(),
  chunkSize: 4 << 20,
  compression: "zstd",
  files,
  meta,
});

const snapshotMeta = (id: string, name: string, extra: Record<string, unknown> = {}) => ({
  kind: "snapshot",
  id,
  names: [name],
  sandboxId: "iaaaaaaaaaaaaaaaaaaaa",
  templateId: "base",
  alias: "base",
  rootfs: join(catalog, "base", "rootfs-r1"),
  runtimeDir: "/",
  envdToken: "t",
  envVars: {},
  cpuCount: 1,
  memoryMB: 512,
  diskSizeMB: 1024,
  sizeBytes: 1,
  createdAt: Date.now(),
  ...extra,
});

before(async () => {
  repo = mkdtempSync("/var/tmp/aenv-trust-repo-");
  victim = mkdtempSync("/var/tmp/aenv-trust-victim-");
  catalog = mkdtempSync("/var/tmp/aenv-trust-tpl-");
  // Own catalog (sharing the base tree): a fetched template must not land in the shared one.
  symlinkSync(join(TEMPLATES_DIR, "base"), join(catalog, "base"));
  for (const d of ["tree", "snapdir", "chunks-ab"]) {
    mkdirSync(join(victim, d));
    writeFileSync(join(victim, d, "keep"), "precious");
  }

  // 1. A template whose rootfsDir climbs out of the templates folder: fetching it would
  //    delete and replace <victim>/tree.
  const evilTpl = {
    id: "eviltpl",
    name: "evil-tpl",
    revision: 1,
    rootfsDir: relative(join(catalog, "eviltpl"), join(victim, "tree")),
  };
  const emptyTar = execFileSync("tar", ["-cf", "-", "-T", "/dev/null"]);
  writeManifest(
    "tpl-eviltpl-r1",
    manifest(
      "tpl-eviltpl-r1",
      [storeFile("rootfs.tar", emptyTar), storeFile("template.json", Buffer.from(JSON.stringify(evilTpl)))],
      { kind: "template", template: evilTpl },
    ),
  );
  // ...and one whose ID does it.
  const evilId = { ...evilTpl, id: relative(catalog, victim), name: "evil-id", rootfsDir: "tree" };
  writeManifest("tpl-x-r1", manifest("tpl-x-r1", [], { kind: "template", template: evilId }));

  // 2. A snapshot stored as snap_evil whose own id climbs into <victim>/snapdir: its local
  //    image folder would be <victim>/snapdir, removed when the server forgets it.
  const sneaky = `../../../../../../../../..${join(victim, "snapdir")}`;
  writeManifest("snap_evil", manifest(sneaky, [], snapshotMeta(sneaky, "evil-snap")));

  // 3. A snapshot whose rootfs is the host's root: it would be mounted into the sandbox.
  writeManifest(
    "snap_root",
    manifest("snap_root", [], snapshotMeta("snap_root", "root-snap", { rootfs: "/", imageKey: "other-runtime" })),
  );

  // 4. A well-formed snapshot whose chunk folder is a symlink out of the repository: reading
  //    or collecting its chunk would reach <victim>/chunks-ab.
  const data = Buffer.from("chunk outside the repository");
  const file = storeFile("memory", data, join(victim, "chunks-ab"));
  const sha = file.chunks[0]?.sha256 ?? "";
  // Old enough for any GC grace period.
  const old = new Date(Date.now() - 30 * 86400_000);
  utimesSync(join(victim, "chunks-ab", `${sha}.zst`), old, old);
  mkdirSync(join(repo, "chunks"), { recursive: true });
  symlinkSync(join(victim, "chunks-ab"), join(repo, "chunks", sha.slice(0, 2)));
  writeManifest(
    "snap_linked",
    manifest("snap_linked", [file], snapshotMeta("snap_linked", "linked-snap", { imageKey: "other-runtime" })),
  );

  // 5. A manifest that is itself a symlink to a host file, and an announcement whose id climbs.
  const secret = manifest("snap_secret", [], snapshotMeta("snap_secret", "secret", { imageKey: "other-runtime" }));
  writeFileSync(join(victim, "secret.json"), JSON.stringify(secret));
  symlinkSync(join(victim, "secret.json"), join(repo, "manifests", "snap_secret.json"));
  mkdirSync(join(repo, "pending"));
  writeFileSync(
    join(repo, "pending", "snap_p.json"),
    JSON.stringify({ id: "../../etc", names: ["pending-evil"], at: Date.now() }),
  );

  server = await startServer({
    templatesDir: catalog,
    env: { AENV_REPOSITORY_PATH: repo, AENV_GC_INTERVAL: "0" },
  });
});

after(async () => {
  await server?.stop();
  if (server) cleanupDataDir(server);
  for (const d of [repo, victim, catalog]) rmSync(d, { recursive: true, force: true });
});

function assertE2bError(r: { status: number; body: unknown }, what: string): void {
  assert.ok(r.status >= 400 && r.status < 600, `${what}: status ${r.status}`);
  const b = r.body as { code?: unknown; message?: unknown };
  assert.equal(typeof b.code, "number", `${what}: ${JSON.stringify(r.body)}`);
  assert.equal(typeof b.message, "string", `${what}: ${JSON.stringify(r.body)}`);
}

const untouched = () => {
  for (const d of ["tree", "snapdir", "chunks-ab"]) {
    assert.equal(readFileSync(join(victim, d, "keep"), "utf8"), "precious", `${d}/keep was touched`);
  }
  assert.ok(existsSync(join(victim, "secret.json")));
  assert.ok(!existsSync(join(catalog, "eviltpl")), "a refused template left a folder in the catalog");
};

test("a template whose folder names climb out of the templates dir is refused, nothing outside touched", async () => {
  for (const ref of ["evil-tpl", "eviltpl", "evil-id"]) {
    const r = await server.api("POST", "/sandboxes", { templateID: ref });
    assertE2bError(r, ref);
    assert.equal(r.status, 404, `${ref}: ${JSON.stringify(r.body)}`);
  }
  untouched();
  assert.match(server.logs(), /tpl-eviltpl-r1.*rejected/);
});

test("a snapshot whose id is not its key is refused; starting or deleting it touches nothing", async () => {
  for (let i = 0; i < 2; i++) {
    const r = await server.api("POST", "/sandboxes", { templateID: "evil-snap" });
    assertE2bError(r, "evil-snap");
    assert.equal(r.status, 404);
  }
  assertE2bError(await server.api("DELETE", "/templates/evil-snap"), "delete evil-snap");
  const list = (await server.api("GET", "/snapshots")).body as Array<{ snapshotID: string }>;
  assert.ok(!list.some((s) => s.snapshotID.includes("..")), JSON.stringify(list));
  untouched();
  assert.match(server.logs(), /snap_evil.*rejected/);
});

test("a snapshot whose rootfs is not a template tree here is never mounted", async () => {
  const r = await server.api("POST", "/sandboxes", { templateID: "root-snap" });
  assertE2bError(r, "root-snap");
  assert.match((r.body as { message: string }).message, /not a template tree/);
});

test("symlinks in a posix_fs repository are not followed: no read, no delete outside", async () => {
  // Adopted by name (then refused: another runtime), so that DELETE finds it and collects its chunk.
  const r = await server.api("POST", "/sandboxes", { templateID: "linked-snap" });
  assertE2bError(r, "linked-snap");
  const del = await server.api("DELETE", "/templates/linked-snap");
  assert.ok([204, 404].includes(del.status), `delete: ${del.status}`);
  const outside = readdirSync(join(victim, "chunks-ab")).filter((n) => n.endsWith(".zst"));
  assert.equal(outside.length, 1, "the chunk outside the repository was deleted");
  // The symlinked manifest is never read; the climbing announcement is never followed.
  for (const ref of ["secret", "snap_secret"]) {
    assert.equal((await server.api("POST", "/sandboxes", { templateID: ref })).status, 404, ref);
  }
  assert.equal((await server.api("POST", "/sandboxes", { templateID: "pending-evil" })).status, 404);
  const list = (await server.api("GET", "/snapshots")).body as Array<{ snapshotID: string }>;
  assert.ok(!list.some((s) => s.snapshotID === "snap_secret"), JSON.stringify(list));
  untouched();
});

test("the server keeps serving", async () => {
  assert.equal((await fetch(`${server.url}/health`)).status, 204);
  assert.equal((await server.api("GET", "/snapshots")).status, 200);
  assert.equal((await server.api("GET", "/templates")).status, 200);
  assert.doesNotMatch(server.logs(), /BUG:/);
});
