// Whoever can write the snapshot repository is not trusted with the host: entries planted in a
// posix_fs repository without the repository key (a copy of a real snapshot renamed to take a
// template's name) are refused and logged; signed ones are still checked (ids that are not
// their key, template folders with "..", a rootfs outside the template trees, symlinked
// folders, a snapshot named like a template); nothing outside the repository is read, written
// or deleted, and the server keeps answering E2B-shaped errors.
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
import { plant, readEntry } from "./helpers/repository.js";
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

/** Signed with the servers' key: what is refused here is refused for what it says. */
function writeManifest(key: string, m: Record<string, unknown>, opts: { unsigned?: boolean } = {}): void {
  plant(repo, "manifest", `manifests/${key}.json`, m, opts);
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
  plant(victim, "manifest", "manifests/snap_secret.json", secret);
  symlinkSync(join(victim, "manifests", "snap_secret.json"), join(repo, "manifests", "snap_secret.json"));
  plant(repo, "announcement", "pending/snap_p.json", { id: "../../etc", names: ["pending-evil"], at: Date.now() });

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
  assert.ok(existsSync(join(victim, "manifests", "snap_secret.json")));
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

type Manifest = { id: string; meta: Record<string, unknown> };

/** A real snapshot of base, committed: what a repository writer copies and edits. */
async function committedSnapshot(): Promise<Manifest> {
  const c = await server.api("POST", "/sandboxes", { templateID: "base" });
  assert.equal(c.status, 201, JSON.stringify(c.body));
  const sbx = (c.body as { sandboxID: string }).sandboxID;
  const snap = await server.api("POST", `/sandboxes/${sbx}/snapshots`, {});
  assert.equal(snap.status, 201, JSON.stringify(snap.body));
  await server.api("DELETE", `/sandboxes/${sbx}`);
  const id = (snap.body as { snapshotID: string }).snapshotID;
  const file = join(repo, "manifests", `${id}.json`);
  for (let i = 0; i < 300 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
  return readEntry<Manifest>(repo, `manifests/${id}.json`);
}

/** The same snapshot under another ID, claiming the name "base" and its own envVars. */
function hijacker(real: Manifest, id: string): Manifest {
  return {
    ...real,
    id,
    meta: { ...real.meta, id, names: [id, "base"], envVars: { HIJACKED: "yes" } },
  };
}

async function startsBase(what: string): Promise<void> {
  const r = await server.api("POST", "/sandboxes", { templateID: "base" });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const b = r.body as { sandboxID: string; templateID: string };
  await server.api("DELETE", `/sandboxes/${b.sandboxID}`);
  assert.doesNotMatch(b.templateID, /^snap_/, `${what}: "base" started the snapshot ${b.templateID}`);
}

test("a manifest written without the repository key is refused: it cannot take the name of a template", async () => {
  const real = await committedSnapshot();
  writeManifest("snap_hijack", hijacker(real, "snap_hijack"), { unsigned: true });
  // The one lookup that would adopt an unsigned manifest, then a plain create of the template.
  const r = await server.api("POST", "/sandboxes", { templateID: "snap_hijack" });
  if (r.status === 201) await server.api("DELETE", `/sandboxes/${(r.body as { sandboxID: string }).sandboxID}`);
  assert.equal(r.status, 404, JSON.stringify(r.body));
  await startsBase("unsigned");
  assert.match(server.logs(), /snap_hijack.*rejected: not signed/);
  // Signed with a key other than the cluster's: the same.
  plant(repo, "manifest", "manifests/snap_otherkey.json", hijacker(real, "snap_otherkey"), {
    key: "some-other-cluster-key-0123456789abcdef",
  });
  assert.equal((await server.api("POST", "/sandboxes", { templateID: "snap_otherkey" })).status, 404);
  assert.match(server.logs(), /snap_otherkey.*rejected: signature does not match/);
});

test("a template's name is never a snapshot's: a signed snapshot named like one loses, and none can be taken", async () => {
  const real = await committedSnapshot();
  writeManifest("snap_named_base", hijacker(real, "snap_named_base"));
  const r = await server.api("POST", "/sandboxes", { templateID: "snap_named_base" });
  assert.equal(r.status, 201, "a signed snapshot is usable by its ID");
  await server.api("DELETE", `/sandboxes/${(r.body as { sandboxID: string }).sandboxID}`);
  await startsBase("signed, adopted");
  // DELETE /templates/base is about the template, not a snapshot calling itself that.
  const c = await server.api("POST", "/sandboxes", { templateID: "base" });
  const sbx = (c.body as { sandboxID: string }).sandboxID;
  const taken = await server.api("POST", `/sandboxes/${sbx}/snapshots`, { name: "base" });
  await server.api("DELETE", `/sandboxes/${sbx}`);
  assert.equal(taken.status, 409, JSON.stringify(taken.body));
  assertE2bError(taken, "snapshot named base");
});

test("signed manifests are validated like a create body: bad envVars, network or mounts are refused", async () => {
  const real = await committedSnapshot();
  const cases: Array<[string, Record<string, unknown>]> = [
    ["snap_badnet", { network: { denyOut: ["example.com"] } }],
    ["snap_badname", { names: ["../x"] }],
    ["snap_badmount", { volumeMounts: [{ name: "v", path: "/mnt", volumeId: "../../etc" }] }],
    ["snap_badenv", { envVars: { A: 1 } }],
  ];
  for (const [id, extra] of cases) {
    writeManifest(id, { ...real, id, meta: { ...real.meta, id, names: [id], ...extra } });
    const r = await server.api("POST", "/sandboxes", { templateID: id });
    if (r.status === 201) await server.api("DELETE", `/sandboxes/${(r.body as { sandboxID: string }).sandboxID}`);
    assert.equal(r.status, 404, `${id}: ${JSON.stringify(r.body)}`);
    assert.match(server.logs(), new RegExp(`${id}.*rejected: snapshot malformed`));
  }
});

test("the server keeps serving", async () => {
  assert.equal((await fetch(`${server.url}/health`)).status, 204);
  assert.equal((await server.api("GET", "/snapshots")).status, 200);
  assert.equal((await server.api("GET", "/templates")).status, 200);
  assert.doesNotMatch(server.logs(), /BUG:/);
});
